package masterserver

import (
	"context"
	"github.com/kvcache-go/mooncake/internal/master"
	"slices"
	"testing"
	"time"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestTaskServiceRPC(t *testing.T) {
	s, c := startTestServer(t, "")
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tc := pb.NewMasterTasksClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for i, name := range []string{"s1", "s2"} {
		st, err := c.MountSegment(ctx, &pb.MountSegmentRequest{ClientId: "n-" + name,
			Segment: &pb.Segment{Name: name, Endpoint: "127.0.0.1:1" + name, Base: uint64(i+1) << 30, Size: 1 << 20}})
		if err != nil || st.Code != 0 {
			t.Fatalf("mount %s: %v %v", name, st, err)
		}
	}
	ps, err := c.PutStart(ctx, &pb.PutStartRequest{ClientId: "w", Key: "k", Size: 100, Config: &pb.ReplicateConfig{PreferredSegments: []string{"s1"}}})
	if err != nil || ps.Status.Code != 0 {
		t.Fatalf("put start: %v %v", ps, err)
	}
	if r, err := c.PutCommit(ctx, &pb.PutCommitRequest{ClientId: "w", Key: "k", Crc32C: 7}); err != nil || r.Status.GetCode() != 0 {
		t.Fatalf("put commit: %v %v", r, err)
	}

	bad, err := tc.CreateCopyTask(ctx, &pb.CreateCopyTaskRequest{Key: "nope", Targets: []string{"s2"}})
	if err != nil || bad.Status.Code != master.CodeObjectNotFound {
		t.Fatalf("copy of a missing key: %v %v", bad, err)
	}
	cr, err := tc.CreateCopyTask(ctx, &pb.CreateCopyTaskRequest{Key: "k", Targets: []string{"s2"}})
	if err != nil || cr.Status.Code != 0 || cr.Id.GetHi()|cr.Id.GetLo() == 0 {
		t.Fatalf("create copy: %v %v", cr, err)
	}
	q, _ := tc.QueryTask(ctx, cr.Id)
	if q.Status.Code != 0 || q.Task.Status != int32(master.TaskPending) || q.Task.Client != "n-s1" || q.Task.Key != "k" {
		t.Fatalf("query: %v", q)
	}
	f, _ := tc.FetchTasks(ctx, &pb.FetchTasksRequest{ClientId: "n-s1", Max: 4})
	if len(f.Tasks) != 1 || f.Tasks[0].Source.Addr != 1<<30 || len(f.Tasks[0].Targets) != 1 ||
		f.Tasks[0].Targets[0].Segment != "s2" || f.Tasks[0].Crc32C != 7 || f.Tasks[0].Size != 100 {
		t.Fatalf("fetch: %v", f)
	}
	if st, _ := tc.FinishTask(ctx, &pb.FinishTaskRequest{ClientId: "n-s1", Id: cr.Id}); st.Code != 0 {
		t.Fatalf("finish: %v", st)
	}
	q, _ = tc.QueryTask(ctx, cr.Id)
	if q.Task.Status != int32(master.TaskSuccess) {
		t.Fatalf("query after finish: %v", q)
	}
	info, _ := c.Query(ctx, &pb.KeyRequest{Key: "k"})
	var segs []string
	for _, r := range info.Replicas {
		segs = append(segs, r.Segment)
	}
	slices.Sort(segs)
	if !slices.Equal(segs, []string{"s1", "s2"}) {
		t.Fatalf("replicas after copy: %v", segs)
	}
	mv, _ := tc.CreateMoveTask(ctx, &pb.CreateMoveTaskRequest{Key: "k", Source: "s1", Target: "s1"})
	if mv.Status.Code != master.CodeInvalidParams {
		t.Fatalf("move onto itself: %v", mv)
	}
	if nf, _ := tc.QueryTask(ctx, &pb.TaskId{Hi: 1, Lo: 1}); nf.Status.Code != -1400 {
		t.Fatalf("unknown task: %v", nf)
	}

	// Replica clear: leased (just read) keys are skipped.
	if _, err := c.GetReplicaList(ctx, &pb.KeyRequest{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	rc, err := tc.BatchReplicaClear(ctx, &pb.BatchReplicaClearRequest{ClientId: "w", Keys: []string{"k"}})
	if err != nil || rc.Status.Code != 0 || len(rc.ClearedKeys) != 0 {
		t.Fatalf("clear of a leased key: %v %v", rc, err)
	}
	if rc, _ := tc.BatchReplicaClear(ctx, &pb.BatchReplicaClearRequest{Keys: []string{"k"}}); rc.Status.Code != master.CodeInvalidParams {
		t.Fatalf("clear without a client id: %v", rc)
	}
}
