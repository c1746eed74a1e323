package store_test

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/master"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestGrantsFakeMount: with grants, a client holding the engine secret
// mounts a "segment" naming a storage node's engine and range, puts an
// object the master places there and reads it with the master's READ
// grant: the victim's bytes at that place. A mount needs a proof signed
// with the grant key (which storage nodes hold and clients do not): the
// fake mount is refused without one, with one of another key and with the
// node's own proof replayed under another client id, so the attacker's put
// lands in real free space and reads nothing of the victim's.
func TestGrantsFakeMount(t *testing.T) {
	keys := grantKeys(t)
	c := newGrantCluster(t, master.Config{}, 1, 4<<20, keys, "")
	node := c.nodes[0]
	victim := grantClient(c)
	ctx := ctxT(t)
	secret := value("secret", 64<<10)
	if err := victim.Put(ctx, "secret", secret); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.master.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	mc := pb.NewMasterServiceClient(conn)
	seg := node.Client().Segment()
	fake := &pb.Segment{Name: "fake", Endpoint: node.Name(), Base: uint64(transfer.AddrOf(seg)), Size: uint64(len(seg))}
	other, _ := grant.ParseKeys([]byte("1:" + grant.NewKeyHex()))
	forged, _ := other.MountProof("attacker", fake.Endpoint, fake.Base, fake.Size, time.Now())
	replayed, _ := keys.MountProof(node.Client().ID(), fake.Endpoint, fake.Base, fake.Size, time.Now()) // the node's, as if sniffed
	for name, proof := range map[string][]byte{"no proof": nil, "another key's": forged, "the node's, another client": replayed} {
		st, err := mc.MountSegment(ctx, &pb.MountSegmentRequest{ClientId: "attacker", Segment: fake, Proof: proof})
		if err != nil || st.Code != master.CodeInvalidParams {
			t.Fatalf("mount with %s proof: %v %v", name, st, err)
		}
		r, err := mc.RemountSegments(ctx, &pb.RemountSegmentsRequest{ClientId: "attacker", Segments: []*pb.Segment{fake}, Proofs: [][]byte{proof}})
		if err != nil || r.Status.GetCode() != master.CodeInvalidParams {
			t.Fatalf("remount with %s proof: %v %v", name, r.GetStatus(), err)
		}
	}
	for _, s := range c.master.Core().Segments() {
		if s.Name == "fake" {
			t.Fatal("the fake segment is mounted")
		}
	}
	// The attacker's put asking for the fake segment goes where the
	// master places it, and reads what it wrote (nothing of the victim's).
	ps, err := mc.PutStart(ctx, &pb.PutStartRequest{ClientId: "attacker", Key: "probe", Size: 64 << 10, Config: &pb.ReplicateConfig{PreferredSegments: []string{"fake"}}})
	if err != nil || ps.Status.GetCode() != 0 {
		t.Fatalf("put: %v %v", err, ps.GetStatus())
	}
	if pc, err := mc.PutCommit(ctx, &pb.PutCommitRequest{ClientId: "attacker", Key: "probe"}); err != nil || pc.Status.GetCode() != 0 {
		t.Fatalf("commit: %v %v", err, pc.GetStatus())
	}
	gl, err := mc.GetReplicaList(ctx, &pb.KeyRequest{Key: "probe"})
	if err != nil || gl.Status.GetCode() != 0 || gl.Replicas[0].Segment == "fake" {
		t.Fatalf("replica list: %v %v", err, gl.GetStatus())
	}
	eng, err := transfer.Open(ctx, transfer.Config{Secret: grantTestSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	buf := make([]byte, gl.Replicas[0].Size)
	if err := eng.RegisterBytes(buf, ""); err != nil {
		t.Fatal(err)
	}
	sid, err := eng.OpenSegment(ctx, gl.Replicas[0].Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Transfer(ctx, []transfer.Request{{Op: transfer.OpRead, Local: transfer.AddrOf(buf), Segment: sid, Remote: gl.Replicas[0].Addr, Length: len(buf), Grant: string(gl.Replicas[0].Grant)}}); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf, secret[:4096]) {
		t.Fatal("the attacker read the victim's bytes")
	}
	if got, err := victim.Get(ctx, "secret"); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("victim's get: %v", err)
	}
}
