package store_test

import (
	"bytes"
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestGrantsSlotOfAnotherTenant: a put slot may hold what its tenant
// wrote before (a reused slot holds the version its commit replaced).
// Tenant b, naming tenant a's client id and a's slot, cannot commit it
// under its own key (slot gone), so it reads nothing of a's; a still
// commits the slot.
func TestGrantsSlotOfAnotherTenant(t *testing.T) {
	c := newTenantGrantCluster(t, master.Config{}, 8<<20, false)
	a, b := newRawTenant(t, c, "token-a-first"), newRawTenant(t, c, "token-b-first")
	const size = 64 << 10
	secret := value("secret", size)
	write := func(r *rawTenant, rep *pb.Replica, v []byte) {
		t.Helper()
		buf := append([]byte(nil), v...)
		if err := r.eng.RegisterBytes(buf, ""); err != nil {
			t.Fatal(err)
		}
		if err := r.eng.Transfer(r.ctx, []transfer.Request{{Op: transfer.OpWrite, Local: transfer.AddrOf(buf), Segment: r.sid, Remote: rep.Addr, Length: len(buf), Grant: string(rep.Grant)}}); err != nil {
			t.Fatal(err)
		}
	}
	// a: K v1 = secret, committed asking for a slot.
	ps, err := a.mc.PutStart(a.ctx, &pb.PutStartRequest{ClientId: "ca", Key: "K", Size: size})
	if err != nil || ps.Status.GetCode() != 0 {
		t.Fatal(err, ps.GetStatus())
	}
	write(a, ps.Replicas[0], secret)
	pc, err := a.mc.PutCommit(a.ctx, &pb.PutCommitRequest{ClientId: "ca", Key: "K", ReserveSize: size, ReserveKeyLen: 1})
	if err != nil || pc.Status.GetCode() != 0 || pc.NextSlot == "" {
		t.Fatal(err, pc.GetStatus(), pc.GetNextSlot())
	}
	// a: K v2 through the slot, upsert, asking for the next slot: v1's space becomes a's next slot.
	write(a, pc.Next.Replicas[0], value("v2", size))
	pc2, err := a.mc.PutCommit(a.ctx, &pb.PutCommitRequest{ClientId: "ca", Key: "K", Slot: pc.NextSlot, Upsert: true, ReserveSize: size, ReserveKeyLen: 1})
	if err != nil || pc2.Status.GetCode() != 0 || pc2.NextSlot == "" {
		t.Fatal(err, pc2.GetStatus(), pc2.GetNextSlot())
	}
	t.Logf("a's next slot %q at %d (v1 was at %d)", pc2.NextSlot, pc2.Next.Replicas[0].Addr, ps.Replicas[0].Addr)
	// b commits a's slot under its own key, claiming a's client id.
	hj, err := b.mc.PutCommit(b.ctx, &pb.PutCommitRequest{ClientId: "ca", Key: "x", Slot: pc2.NextSlot})
	if err != nil || !hj.GetSlotGone() {
		if gl, err := b.mc.GetReplicaList(b.ctx, &pb.KeyRequest{Key: "x"}); err == nil && gl.Status.GetCode() == 0 && bytes.Equal(b.read(gl.Replicas[0]), secret) {
			t.Fatal("b read a's old version through a's slot")
		}
		t.Fatalf("b's commit of a's slot: %v %v, want slot gone", err, hj.GetStatus())
	}
	if gl, err := b.mc.GetReplicaList(b.ctx, &pb.KeyRequest{Key: "x"}); err != nil || gl.Status.GetCode() != master.Code(master.ErrObjectNotFound) {
		t.Fatalf("b's key after the refused commit: %v %v", err, gl.GetStatus())
	}
	write(a, pc2.Next.Replicas[0], value("v3", size))
	if pc3, err := a.mc.PutCommit(a.ctx, &pb.PutCommitRequest{ClientId: "ca", Key: "K", Slot: pc2.NextSlot, Upsert: true}); err != nil || pc3.Status.GetCode() != 0 || pc3.SlotGone {
		t.Fatalf("a's own commit of its slot: %v %v gone=%v", err, pc3.GetStatus(), pc3.GetSlotGone())
	}
	gl, err := a.mc.GetReplicaList(a.ctx, &pb.KeyRequest{Key: "K"})
	if err != nil || gl.Status.GetCode() != 0 || !bytes.Equal(a.read(gl.Replicas[0]), value("v3", size)) {
		t.Fatalf("a's K after its slot commit: %v %v", err, gl.GetStatus())
	}
}
