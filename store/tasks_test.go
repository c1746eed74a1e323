package store_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

func replicaSegments(t *testing.T, cl *store.Client, key string) []string {
	t.Helper()
	info, err := cl.Stat(ctxT(t), key)
	if err != nil {
		t.Fatalf("stat %q: %v", key, err)
	}
	var out []string
	for _, r := range info.Replicas {
		out = append(out, r.Segment)
	}
	slices.Sort(out)
	return out
}

func sortedNames(ns ...*storenode.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name())
	}
	slices.Sort(out)
	return out
}

func TestReplicaClearClient(t *testing.T) {
	c := newCluster(t, master.Config{Durable: true, LeaseTTL: 300 * time.Millisecond}, 2, 16<<20)
	cl := c.client(nil)
	other := c.client(nil)
	ctx := ctxT(t)
	v := value("k", 100<<10)
	if err := cl.PutWith(ctx, "k", v, store.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.BatchReplicaClear(ctx, []string{"k"}, ""); err != nil || len(got) != 0 {
		t.Fatalf("clear of a fresh object: %v %v", got, err)
	}
	n0, n1 := c.nodes[0], c.nodes[1]
	var got []string
	waitfor.Cond(t, 10*time.Second, "the replica on node 0 cleared", func() bool {
		var err error
		got, err = cl.BatchReplicaClear(ctx, []string{"k"}, n0.Name())
		return err == nil && len(got) == 1
	})
	if segs := replicaSegments(t, cl, "k"); !slices.Equal(segs, []string{n1.Name()}) {
		t.Fatalf("replicas after clearing node 0: %v", segs)
	}
	if b, err := other.Get(ctx, "k"); err != nil || !bytes.Equal(b, v) {
		t.Fatalf("get after a partial clear: %v", err)
	}
	waitfor.Cond(t, 10*time.Second, "k cleared", func() bool {
		// Only the client that put it may clear it, leased or not.
		if got, _ := other.BatchReplicaClear(ctx, []string{"k"}, ""); len(got) != 0 {
			t.Fatalf("another client cleared our key: %v", got)
		}
		got, _ = cl.BatchReplicaClear(ctx, []string{"k", "missing"}, "")
		return len(got) == 1
	})
	if _, err := other.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after clear: %v", err)
	}
}

func TestCopyAndMoveTasksClient(t *testing.T) {
	c := newCluster(t, master.Config{Durable: true}, 3, 16<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	n0, n1, n2 := c.nodes[0], c.nodes[1], c.nodes[2]
	v := value("k", 300<<10)
	if err := cl.PutWith(ctx, "k", v, store.PutOptions{PreferredSegments: []string{n0.Name()}}); err != nil {
		t.Fatal(err)
	}

	id, err := cl.CreateCopyTask(ctx, "k", []string{n1.Name(), n2.Name()})
	if err != nil {
		t.Fatal(err)
	}
	task, err := cl.WaitTask(ctx, id, 10*time.Millisecond)
	if err != nil || task.Status != store.TaskSuccess || task.Type != store.TaskCopy || task.Source != n0.Name() {
		t.Fatalf("copy task %+v %v", task, err)
	}
	if segs := replicaSegments(t, cl, "k"); !slices.Equal(segs, sortedNames(n0, n1, n2)) {
		t.Fatalf("replicas after copy: %v", segs)
	}
	info, _ := cl.Stat(ctx, "k")
	for _, r := range info.Replicas { // every copy holds the value
		n := nodeOf(c, r)
		off := replicaOffset(t, n, r)
		if !bytes.Equal(n.Client().Segment()[off:off+len(v)], v) {
			t.Fatalf("replica on %s differs", r.Segment)
		}
	}

	m := value("m", 70<<10)
	if err := cl.PutWith(ctx, "m", m, store.PutOptions{PreferredSegments: []string{n0.Name()}}); err != nil {
		t.Fatal(err)
	}
	id, err = cl.CreateMoveTask(ctx, "m", n0.Name(), n2.Name())
	if err != nil {
		t.Fatal(err)
	}
	if task, err := cl.WaitTask(ctx, id, 10*time.Millisecond); err != nil || task.Status != store.TaskSuccess {
		t.Fatalf("move task %+v %v", task, err)
	}
	if segs := replicaSegments(t, cl, "m"); !slices.Equal(segs, []string{n2.Name()}) {
		t.Fatalf("replicas after move: %v", segs)
	}
	if b, err := cl.Get(ctx, "m"); err != nil || !bytes.Equal(b, m) {
		t.Fatalf("get after move: %v", err)
	}

	// A corrupt source is not copied.
	bad := value("bad", 10<<10)
	if err := cl.PutWith(ctx, "bad", bad, store.PutOptions{PreferredSegments: []string{n0.Name()}}); err != nil {
		t.Fatal(err)
	}
	info, _ = cl.Stat(ctx, "bad")
	off := replicaOffset(t, n0, info.Replicas[0])
	n0.Client().Segment()[off+5] ^= 0xff
	id, _ = cl.CreateCopyTask(ctx, "bad", []string{n1.Name()})
	if task, err := cl.WaitTask(ctx, id, 10*time.Millisecond); err != nil || task.Status != store.TaskFailed || !strings.Contains(task.Message, "checksum") {
		t.Fatalf("copy of a corrupt replica %+v %v", task, err)
	}
	if segs := replicaSegments(t, cl, "bad"); !slices.Equal(segs, []string{n0.Name()}) {
		t.Fatalf("replicas after a failed copy: %v", segs)
	}

	if _, err := cl.CreateCopyTask(ctx, "nope", []string{n1.Name()}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("copy of a missing key: %v", err)
	}
	if _, err := cl.CreateCopyTask(ctx, "k", []string{"127.0.0.1:1"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("copy to an unknown segment: %v", err)
	}
	if _, err := cl.QueryTask(ctx, store.TaskID{Hi: 9, Lo: 9}); !errors.Is(err, store.ErrTaskNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
}
