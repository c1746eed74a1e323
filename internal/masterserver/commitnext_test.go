package masterserver

import (
	"context"
	"strings"
	"testing"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	"github.com/kvcache-go/mooncake/internal/master"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"google.golang.org/protobuf/proto"
)

// PutCommit on the fast path, asking for a slot: a commit that goes
// through answers the next slot (its replicas, sequence number and header
// length); one the key's rules refuse answers no slot and the refused
// slot's tombstone.
func TestFastPutCommitNextSlot(t *testing.T) {
	m, err := master.New(master.Config{Durable: true}, newFakeClock())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MountSegment("c", master.SegmentSpec{Name: "a", Endpoint: "ep", Base: 1 << 30, Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	h := NewService(m).FastHandler(context.Background())
	call := func(method uint8, req, resp proto.Message) {
		t.Helper()
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		out, st := h(method, b)
		if st != fastrpc.StatusOK {
			t.Fatalf("method %d: status %d %s", method, st, out)
		}
		if err := proto.Unmarshal(out, resp); err != nil {
			t.Fatal(err)
		}
	}
	var start pb.PutStartResponse
	call(pb.FastPutStart, &pb.PutStartRequest{ClientId: "c", Key: "k1", Size: 100}, &start)
	if start.Status.GetCode() != 0 {
		t.Fatalf("PutStart: %v", start.Status)
	}
	var c1 pb.PutCommitResponse
	call(pb.FastPutCommit, &pb.PutCommitRequest{ClientId: "c", Key: "k1", Crc32C: 1, ReserveSize: 100, ReserveKeyLen: 2}, &c1)
	if c1.Status.GetCode() != 0 || !strings.HasPrefix(c1.NextSlot, master.SlotPrefix) || len(c1.Next.GetReplicas()) != 1 || c1.Next.Seq <= start.Seq || c1.Next.HeaderLen == 0 {
		t.Fatalf("commit of a PutStart asking for a slot: %+v", &c1)
	}
	var c2 pb.PutCommitResponse
	call(pb.FastPutCommit, &pb.PutCommitRequest{ClientId: "c", Key: "k2", Slot: c1.NextSlot, Crc32C: 2, ReserveSize: 100, ReserveKeyLen: 2}, &c2)
	if c2.Status.GetCode() != 0 || c2.SlotGone || c2.NextSlot == "" || c2.NextSlot == c1.NextSlot || c2.Next.Seq <= c1.Next.Seq {
		t.Fatalf("commit of a slot asking for the next: %+v", &c2)
	}
	if info, err := m.GetReplicaList("k2"); err != nil || info.CRC != 2 || info.Replicas[0].Addr != c1.Next.Replicas[0].Addr {
		t.Fatalf("k2 = %+v, %v: want the slot's space", info, err)
	}
	var c3 pb.PutCommitResponse // k1 exists, no upsert: refused
	call(pb.FastPutCommit, &pb.PutCommitRequest{ClientId: "c", Key: "k1", Slot: c2.NextSlot, Crc32C: 3, ReserveSize: 100, ReserveKeyLen: 2}, &c3)
	if c3.Status.GetCode() == 0 || c3.NextSlot != "" || c3.Next != nil || len(c3.Tombstones) != 1 || c3.Tombstones[0].Seq != c2.Next.Seq {
		t.Fatalf("refused commit: %+v", &c3)
	}
	if st := m.Stats(); st.PutSlots != 0 || st.Objects != 2 {
		t.Fatalf("stats %+v: want k1, k2 and no slot", st)
	}
}

// BenchmarkFastPutCommitUpsert: the master's side of a small put from a
// client that rewrites its keys (the store's hot path): a fast PutCommit of
// a reused slot asking for the next, decoded, handled and encoded; plain
// (no tenants) and by a tenant (its namespace, quota accounting and
// admission).
func BenchmarkFastPutCommitUpsert(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchFastPutCommitUpsert(b, false) })
	b.Run("tenant", func(b *testing.B) { benchFastPutCommitUpsert(b, true) })
}

func benchFastPutCommitUpsert(b *testing.B, tenants bool) {
	m, err := master.New(master.Config{Durable: true}, newFakeClock())
	if err != nil {
		b.Fatal(err)
	}
	if err := m.MountSegment("c", master.SegmentSpec{Name: "a", Endpoint: "ep", Base: 1 << 30, Size: 64 << 20}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if tenants {
		set, err := tenant.Parse([]byte("version: 1\ntenants: [{name: bench, quota: 1TB, tokens: [{token: bench-token-0001}]}]"))
		if err != nil {
			b.Fatal(err)
		}
		m.SetTenantQuotas(newTenantQuotas(tenant.Static(set)))
		ctx = withCaller(ctx, set.Lookup("bench"))
	}
	h := NewService(m).FastHandler(ctx)
	commit := func(key, slot string) *pb.PutCommitResponse {
		req, _ := proto.Marshal(&pb.PutCommitRequest{ClientId: "c", Key: key, Slot: slot, Crc32C: 1, Upsert: true,
			Config: &pb.ReplicateConfig{Replicas: 1}, ReserveSize: 4096, ReserveKeyLen: uint64(len(key))})
		out, st := h(pb.FastPutCommit, req)
		var resp pb.PutCommitResponse
		if st != fastrpc.StatusOK || proto.Unmarshal(out, &resp) != nil || resp.Status.GetCode() != 0 || resp.NextSlot == "" {
			b.Fatalf("commit of %s: status %d %s", key, st, out)
		}
		return &resp
	}
	keys := make([]string, 256)
	slot := ""
	for i := range keys {
		keys[i] = "bench/" + strings.Repeat("k", 8) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		var start pb.PutStartResponse
		req, _ := proto.Marshal(&pb.PutStartRequest{ClientId: "c", Key: keys[i], Size: 4096, Config: &pb.ReplicateConfig{Replicas: 1}})
		out, _ := h(pb.FastPutStart, req)
		if err := proto.Unmarshal(out, &start); err != nil || start.Status.GetCode() != 0 {
			b.Fatalf("PutStart: %v %v", err, start.Status)
		}
		slot = commit(keys[i], "").NextSlot
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		slot = commit(keys[i%len(keys)], slot).NextSlot
		i++
	}
}
