package masterserver

import (
	"context"
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"google.golang.org/protobuf/proto"
)

// FuzzFastHandler: any method number and payload gets an answer (never a
// panic); unknown methods and undecodable payloads are refused.
func FuzzFastHandler(f *testing.F) {
	put, _ := proto.Marshal(&pb.PutStartRequest{ClientId: "c", Key: "k", Size: 100})
	commit, _ := proto.Marshal(&pb.PutCommitRequest{ClientId: "c", Key: "k", Slot: master.SlotPrefix + "c/1", ReserveSize: 100, ReserveKeyLen: 1})
	keys, _ := proto.Marshal(&pb.BatchKeysRequest{Keys: []string{"k", "", "x"}})
	f.Add(pb.FastPutStart, put)
	f.Add(pb.FastPutCommit, commit)
	f.Add(pb.FastBatchExistBits, keys)
	f.Add(uint8(200), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, method uint8, payload []byte) {
		m, err := master.New(master.Config{Durable: true}, newFakeClock())
		if err != nil {
			t.Fatal(err)
		}
		if err := m.MountSegment("c", master.SegmentSpec{Name: "a", Endpoint: "ep", Base: 1 << 30, Size: 1 << 20}); err != nil {
			t.Fatal(err)
		}
		h := NewService(m).FastHandler(context.Background())
		resp, st := h(method, payload)
		if st == fastrpc.StatusOK && (method == 0 || method > pb.FastLast) {
			t.Fatalf("method %d answered OK", method)
		}
		if st != fastrpc.StatusOK && len(resp) == 0 {
			t.Fatal("a refusal without a message")
		}
		if method == pb.FastBatchExistBits && st == fastrpc.StatusOK {
			var r pb.BatchKeysRequest
			if proto.Unmarshal(payload, &r) == nil && len(resp) != len(r.Keys) {
				t.Fatalf("%d answers for %d keys", len(resp), len(r.Keys))
			}
		}
	})
}
