package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/logtest"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"google.golang.org/grpc"
)

// reverseMaster answers a remount's chunk calls out of order: an odd
// chunk's call waits (a few seconds at most) until the chunk after it was
// answered, as a master whose answers overtake each other on the way back.
// It counts the reports of each chunk and the answers that came before an
// earlier chunk's.
type reverseMaster struct {
	pb.MasterServiceClient
	mu       sync.Mutex
	cond     *sync.Cond
	answered map[uint32]bool
	chunks   map[uint32]int
	overtook int
}

func (f *reverseMaster) RemountSegments(ctx context.Context, r *pb.RemountSegmentsRequest, _ ...grpc.CallOption) (*pb.RemountSegmentsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Chunk%2 == 1 && r.More {
		timer := time.AfterFunc(3*time.Second, func() { f.mu.Lock(); f.cond.Broadcast(); f.mu.Unlock() })
		defer timer.Stop()
		for deadline := time.Now().Add(3 * time.Second); !f.answered[r.Chunk+1] && time.Now().Before(deadline) && ctx.Err() == nil; {
			f.cond.Wait()
		}
	}
	if f.answered[r.Chunk+1] {
		f.overtook++
	}
	f.answered[r.Chunk] = true
	f.chunks[r.Chunk] = len(r.Objects)
	f.cond.Broadcast()
	// Each answer names a tombstone of its own chunk's first report to zero.
	var tombs []*pb.HeaderRef
	if len(r.Objects) > 0 {
		tombs = []*pb.HeaderRef{{Segment: "seg", Offset: r.Objects[0].Offset, Seq: r.Objects[0].Seq}}
	}
	return &pb.RemountSegmentsResponse{Status: &pb.Status{}, Restored: int64(len(r.Objects)), Dropped: 1, RestoreId: 9, Window: 4, Tombstones: tombs}, nil
}

// TestRemountRepliesOutOfOrder: the answers of a pipelined remount's calls
// may come in any order: every report is sent once, every answer counted
// once, and the remount ends when the last one is in.
func TestRemountRepliesOutOfOrder(t *testing.T) {
	held := make([]*pb.HeldObject, 9*remountChunkObjects+7)
	for i := range held {
		held[i] = &pb.HeldObject{Segment: "seg", Offset: uint64(i) * 4096, Key: fmt.Sprint("k", i), Size: 100, Seq: uint64(i + 1)}
	}
	f := &reverseMaster{answered: map[uint32]bool{}, chunks: map[uint32]int{}}
	f.cond = sync.NewCond(&f.mu)
	c := &Client{cfg: Config{ClientID: "node-1", RPCTimeout: 10 * time.Second}, rpc: f, log: slog.New(&logtest.Recorder{})}
	st, err := c.remount(context.Background(), []*pb.Segment{{Name: "seg", Endpoint: "ep", Size: 1 << 40}}, held)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sent := 0
	for n := range uint32(len(f.chunks)) {
		sent += f.chunks[n]
	}
	if f.overtook == 0 {
		t.Fatal("no answer overtook an earlier one: the test's premise")
	}
	if sent != len(held) || st.reports != len(held) || st.restored != int64(len(held)) || st.dropped != int64(st.calls) || st.calls != len(f.chunks) {
		t.Fatalf("%d reports sent in %d chunks; stats %+v", sent, len(f.chunks), st)
	}
}
