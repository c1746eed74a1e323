package masterserver

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

func newDurableCore(t *testing.T) *master.Master {
	t.Helper()
	m, err := master.New(master.Config{Durable: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRemountSegmentsService: the RemountSegments handler runs a session
// over the wire messages: the first call opens it (and answers its id
// while more follow), later calls go on, the last one ends it; a single
// call without more is a whole remount; an unknown session is refused
// with an error status.
func TestRemountSegmentsService(t *testing.T) {
	m := newDurableCore(t)
	svc := NewService(m)
	ctx := context.Background()
	seg := &pb.Segment{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: 1 << 20}
	obj := func(i int) *pb.HeldObject {
		return &pb.HeldObject{Segment: "a", Offset: uint64(i) * 4096, Key: fmt.Sprint("k", i), Size: 1000, Crc32C: 1, Seq: uint64(i + 1)}
	}
	first, _ := svc.RemountSegments(ctx, &pb.RemountSegmentsRequest{ClientId: "c", Segments: []*pb.Segment{seg}, Objects: []*pb.HeldObject{obj(0), obj(1)}, More: true})
	if first.Status.GetCode() != 0 || first.RestoreId == 0 || first.Restored != 1 {
		t.Fatalf("first call: %+v", first)
	}
	id := first.RestoreId
	if ok, _ := m.Exist("k0"); !ok {
		t.Fatal("k0 not restored by the first call")
	}
	mid, _ := svc.RemountSegments(ctx, &pb.RemountSegmentsRequest{ClientId: "c", RestoreId: id, Chunk: 1, Objects: []*pb.HeldObject{obj(2)}, More: true})
	again, _ := svc.RemountSegments(ctx, &pb.RemountSegmentsRequest{ClientId: "c", RestoreId: id, Chunk: 1, Objects: []*pb.HeldObject{obj(2)}, More: true})
	last, _ := svc.RemountSegments(ctx, &pb.RemountSegmentsRequest{ClientId: "c", RestoreId: id, Chunk: 2, Objects: []*pb.HeldObject{obj(3)}})
	if mid.Status.GetCode() != 0 || mid.RestoreId != id || again.Status.GetCode() != 0 || again.Restored != 0 ||
		last.Status.GetCode() != 0 || last.RestoreId != 0 || first.Restored+mid.Restored+last.Restored != 4 {
		t.Fatalf("calls: %+v / %+v / %+v", mid, again, last)
	}
	if st := m.Stats(); st.Objects != 4 {
		t.Fatalf("%d objects after the session", st.Objects)
	}
	late, _ := svc.RemountSegments(ctx, &pb.RemountSegmentsRequest{ClientId: "c", RestoreId: id, Chunk: 3, Objects: []*pb.HeldObject{obj(4)}})
	if late.Status.GetCode() != master.CodeInvalidParams {
		t.Fatalf("a call of an ended session: %+v", late)
	}

	// One call: a whole remount (a node with few objects).
	m2 := newDurableCore(t)
	one, _ := NewService(m2).RemountSegments(ctx, &pb.RemountSegmentsRequest{ClientId: "c", Segments: []*pb.Segment{seg}, Objects: []*pb.HeldObject{obj(1), obj(0)}})
	if one.Status.GetCode() != 0 || one.Restored != 2 || one.RestoreId != 0 || m2.Stats().Objects != 2 {
		t.Fatalf("one call: %+v", one)
	}
}
