package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/logtest"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"google.golang.org/grpc"
)

// fakeRemountMaster answers RemountSegments (the rest of the interface is
// not called): it records a copy of each request (a node reuses a
// request's report slice once it is answered, as a transport copied it) and
// refuses them while refuse is set.
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
	f.reqs = append(f.reqs, &pb.RemountSegmentsRequest{ClientId: r.ClientId, Segments: r.Segments, Objects: slices.Clone(r.Objects), RestoreId: r.RestoreId, Chunk: r.Chunk, More: r.More})
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

// windowMaster is a master that grants a window: it answers the first call
// with window and holds each later call until another is in flight with
// it (at most a few seconds), so that the calls' overlap shows; it fails
// the call of chunk failAt (0: none).
type windowMaster struct {
	pb.MasterServiceClient
	window uint32
	failAt uint32

	mu          sync.Mutex
	cond        *sync.Cond
	inflight    int
	maxInflight int
	chunks      map[uint32]int // reports per chunk
	total       uint64
}

func (w *windowMaster) RemountSegments(ctx context.Context, r *pb.RemountSegmentsRequest, _ ...grpc.CallOption) (*pb.RemountSegmentsResponse, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.RestoreId == 0 {
		w.total = r.Total
		w.chunks[r.Chunk] = len(r.Objects)
		return &pb.RemountSegmentsResponse{Status: &pb.Status{}, Restored: int64(len(r.Objects)), RestoreId: 9, Window: w.window}, nil
	}
	w.inflight++
	w.maxInflight = max(w.maxInflight, w.inflight)
	w.cond.Broadcast()
	deadline := time.Now().Add(3 * time.Second)
	stop := context.AfterFunc(ctx, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer stop()
	timer := time.AfterFunc(time.Until(deadline), func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer timer.Stop()
	for r.More && w.maxInflight < 2 && ctx.Err() == nil && time.Now().Before(deadline) {
		w.cond.Wait()
	}
	w.inflight--
	w.chunks[r.Chunk] = len(r.Objects)
	if r.Chunk == w.failAt {
		return &pb.RemountSegmentsResponse{Status: &pb.Status{Code: 3, Message: "refused"}}, nil
	}
	return &pb.RemountSegmentsResponse{Status: &pb.Status{}, Restored: int64(len(r.Objects)), RestoreId: 9}, nil
}

// TestRemountPipelined: with a window granted, a remount keeps several
// chunk calls in flight (never more than the window or its own bound),
// announces its total in the first call, and sends every report once; a
// refused chunk fails the remount once every call in flight has ended.
func TestRemountPipelined(t *testing.T) {
	held := make([]*pb.HeldObject, 10*remountChunkObjects+5)
	for i := range held {
		held[i] = &pb.HeldObject{Segment: "seg", Offset: uint64(i) * 4096, Key: fmt.Sprint("k", i), Size: 100, Seq: uint64(i)}
	}
	seg := []*pb.Segment{{Name: "seg", Endpoint: "ep", Size: 1 << 40}}
	for _, tt := range []struct {
		window, failAt uint32
		wantMax        int
	}{{2, 0, 2}, {8, 0, remountWindow}, {8, 4, remountWindow}} {
		w := &windowMaster{window: tt.window, failAt: tt.failAt, chunks: map[uint32]int{}}
		w.cond = sync.NewCond(&w.mu)
		c := &Client{cfg: Config{ClientID: "node-1", RPCTimeout: 10 * time.Second}, rpc: w, log: slog.New(&logtest.Recorder{})}
		st, err := c.remount(context.Background(), seg, held)
		w.mu.Lock()
		if w.inflight != 0 || w.maxInflight < 2 || w.maxInflight > tt.wantMax || w.total != uint64(len(held)) {
			t.Fatalf("window %d: %d calls still in flight, at most %d at once (want 2..%d), total %d announced", tt.window, w.inflight, w.maxInflight, tt.wantMax, w.total)
		}
		if tt.failAt != 0 {
			if err == nil || !strings.Contains(err.Error(), "refused") {
				t.Fatalf("window %d: a refused chunk: %v", tt.window, err)
			}
			w.mu.Unlock()
			continue
		}
		sent := 0
		for n := range uint32(len(w.chunks)) {
			sent += w.chunks[n]
		}
		if err != nil || sent != len(held) || st.restored != int64(len(held)) || st.calls != len(w.chunks) {
			t.Fatalf("window %d: %v, %d reports in %d chunks, stats %+v", tt.window, err, sent, len(w.chunks), st)
		}
		w.mu.Unlock()
	}
}
