package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/logtest"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"google.golang.org/grpc"
)

// fakeRemountMaster answers RemountSegments (the rest of the interface is
// not called): it records each request and refuses them while refuse is
// set.
type fakeRemountMaster struct {
	pb.MasterServiceClient
	mu     sync.Mutex
	reqs   []*pb.RemountSegmentsRequest
	sizes  []int
	refuse error
}

func (f *fakeRemountMaster) RemountSegments(_ context.Context, r *pb.RemountSegmentsRequest, _ ...grpc.CallOption) (*pb.RemountSegmentsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, &pb.RemountSegmentsRequest{ClientId: r.ClientId, Segments: r.Segments, Objects: r.Objects, RestoreId: r.RestoreId, Chunk: r.Chunk, More: r.More})
	f.sizes = append(f.sizes, r.SizeVT())
	if f.refuse != nil {
		return nil, f.refuse
	}
	out := &pb.RemountSegmentsResponse{Status: &pb.Status{}, Restored: int64(len(r.Objects))}
	if r.More {
		out.RestoreId = 77
	}
	return out, nil
}

func fakeClient(f *fakeRemountMaster, logs *logtest.Recorder) *Client {
	return &Client{cfg: Config{ClientID: "node-1", PingInterval: 20 * time.Millisecond, RPCTimeout: time.Second}, rpc: f, log: slog.New(logs)}
}

// TestRemountChunks: a remount of many reports is cut into calls within
// both bounds, numbered in order, of one session, the segments in the
// first only; a small one is one call.
func TestRemountChunks(t *testing.T) {
	for _, tt := range []struct {
		name   string
		n      int
		keyLen int
		calls  int
	}{
		{"empty", 0, 8, 1},
		{"one chunk", 1000, 8, 1},
		{"by count", 100_000, 8, 7},                     // 16384 per call
		{"by bytes", 20_000, 200, 5},                    // ~250 bytes each: 1 MiB is ~4,100 reports
		{"exactly one count", 16384, 8, 1},              // the bound itself
		{"one past the count", 16385, 8, 2},             // and one more
		{"a report over the byte bound", 2, 2 << 20, 2}, // each alone in its call
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeRemountMaster{}
			c := fakeClient(f, &logtest.Recorder{})
			held := make([]*pb.HeldObject, tt.n)
			for i := range held {
				held[i] = &pb.HeldObject{Segment: "seg", Offset: uint64(i) * 4096, Key: fmt.Sprint(strings.Repeat("k", tt.keyLen), i), Size: 100, Seq: uint64(i)}
			}
			seg := []*pb.Segment{{Name: "seg", Endpoint: "ep", Size: 1 << 30}}
			st, err := c.remount(context.Background(), seg, held)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.reqs) != tt.calls || st.calls != tt.calls || st.restored != int64(tt.n) {
				t.Fatalf("%d calls (stats %+v), want %d", len(f.reqs), st, tt.calls)
			}
			next := 0
			for i, r := range f.reqs {
				wantID := uint64(77)
				if i == 0 {
					wantID = 0
				}
				if r.Chunk != uint32(i) || r.RestoreId != wantID || r.More != (i < len(f.reqs)-1) || (len(r.Segments) == 1) != (i == 0) {
					t.Fatalf("call %d: chunk %d id %d more %v segments %d", i, r.Chunk, r.RestoreId, r.More, len(r.Segments))
				}
				if len(r.Objects) > remountChunkObjects || (len(r.Objects) > 1 && f.sizes[i] > remountChunkBytes+1024) {
					t.Fatalf("call %d: %d objects, %d bytes", i, len(r.Objects), f.sizes[i])
				}
				for _, o := range r.Objects { // every report once, in order
					if o.Seq != uint64(next) {
						t.Fatalf("call %d: report %d, want %d", i, o.Seq, next)
					}
					next++
				}
			}
			if next != tt.n {
				t.Fatalf("%d reports sent, want %d", next, tt.n)
			}
		})
	}
}

// TestRemountRefusedBacksOff: a refused remount is logged at WARN with
// the reason and retried only after a growing backoff, also when the
// master no longer asks (it knows the client from the refused session's
// first call); a success clears it.
func TestRemountRefusedBacksOff(t *testing.T) {
	f := &fakeRemountMaster{refuse: errors.New("grpc: received message larger than max")}
	logs := &logtest.Recorder{}
	c := fakeClient(f, logs)
	ctx := context.Background()
	for range 100 { // a tight ping loop: one try
		c.remountOnPing(ctx, true)
	}
	if len(f.reqs) != 1 || !c.Health().RemountPending {
		t.Fatalf("%d remount calls in a tight loop, pending %v", len(f.reqs), c.Health().RemountPending)
	}
	warns := logs.At(slog.LevelWarn)
	if len(warns) != 1 || !strings.Contains(warns[0], "larger than max") {
		t.Fatalf("warnings: %q", warns)
	}
	first := c.remountSt.backoff
	c.mu.Lock()
	c.remountSt.retryAt = time.Time{} // the backoff has passed
	c.mu.Unlock()
	c.remountOnPing(ctx, false) // retried without NEED_REMOUNT
	if len(f.reqs) != 2 || c.remountSt.backoff != 2*first || first < remountBackoffMin {
		t.Fatalf("retry: %d calls, backoff %v then %v", len(f.reqs), first, c.remountSt.backoff)
	}
	f.mu.Lock()
	f.refuse = nil
	f.mu.Unlock()
	c.mu.Lock()
	c.remountSt.retryAt = time.Time{}
	c.mu.Unlock()
	c.remountOnPing(ctx, false)
	if h := c.Health(); h.RemountPending || h.Remounts != 1 || len(f.reqs) != 3 {
		t.Fatalf("after a success: %+v, %d calls", h, len(f.reqs))
	}
	c.remountOnPing(ctx, false) // nothing to do
	if len(f.reqs) != 3 {
		t.Fatalf("remounted again without a reason: %d calls", len(f.reqs))
	}
}
