package master

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCopyTaskLifecycle(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20, "c": 1 << 20})
	mustPut(t, m, "k", 1000, ReplicateConfig{PreferredSegments: []string{"a"}})

	for _, tc := range []struct {
		name    string
		key     string
		targets []string
		want    error
	}{
		{"missing key", "nope", []string{"b"}, ErrObjectNotFound},
		{"no targets", "k", nil, ErrInvalidParams},
		{"unmounted target", "k", []string{"zz"}, ErrInvalidParams},
	} {
		if _, err := m.CreateCopyTask(tc.key, tc.targets); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}

	id, err := m.CreateCopyTask("k", []string{"b", "c", "a"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := m.QueryTask(id)
	if err != nil || task.Status != TaskPending || task.Type != TaskCopy || task.Source != "a" || task.Client != "client-a" {
		t.Fatalf("new task %+v %v", task, err)
	}
	if as := m.FetchTasks("client-b", 8); len(as) != 0 {
		t.Fatalf("another client fetched %+v", as)
	}
	clk.Advance(time.Second)
	as := m.FetchTasks("client-a", 8)
	if len(as) != 1 {
		t.Fatalf("fetched %d tasks, want 1", len(as))
	}
	a := as[0]
	if a.From.Segment != "a" || a.Size != 1000 || a.CRC != 42 || len(a.To) != 2 { // a holds it already
		t.Fatalf("assignment %+v", a)
	}
	if task, _ := m.QueryTask(id); task.Status != TaskProcessing || !task.Updated.After(task.Created) {
		t.Fatalf("fetched task %+v", task)
	}
	if err := m.FinishTask("client-b", id, ""); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("finish by another client: %v", err)
	}
	if err := m.FinishTask("client-a", id, ""); err != nil {
		t.Fatal(err)
	}
	task, _ = m.QueryTask(id)
	if task.Status != TaskSuccess {
		t.Fatalf("finished task %+v", task)
	}
	info, _ := m.Query("k")
	if !slices.Equal(segmentsOf(info), []string{"a", "b", "c"}) {
		t.Fatalf("replicas after copy: %v", segmentsOf(info))
	}
	if _, err := m.QueryTask(TaskID{1, 2}); !errors.Is(err, ErrTaskNotFound) || Code(err) != -1400 {
		t.Fatalf("unknown task: %v (code %d)", err, Code(err))
	}
}

func TestMoveTask(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	mustPut(t, m, "k", 1000, ReplicateConfig{PreferredSegments: []string{"a"}})
	if _, err := m.CreateMoveTask("k", "a", "a"); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("move onto itself: %v", err)
	}
	if _, err := m.CreateMoveTask("k", "b", "a"); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("move from a segment without a replica: %v", err)
	}
	ua := usedOn(m, "a")
	id, err := m.CreateMoveTask("k", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	as := m.FetchTasks("client-a", 8)
	if len(as) != 1 || len(as[0].To) != 1 || as[0].To[0].Segment != "b" {
		t.Fatalf("assignment %+v", as)
	}
	if err := m.FinishTask("client-a", id, ""); err != nil {
		t.Fatal(err)
	}
	info, _ := m.Query("k")
	if !slices.Equal(segmentsOf(info), []string{"b"}) || usedOn(m, "a") >= ua {
		t.Fatalf("after move: replicas %v, a uses %d (was %d)", segmentsOf(info), usedOn(m, "a"), ua)
	}
	if task, _ := m.QueryTask(id); task.Status != TaskSuccess || task.Type != TaskMove {
		t.Fatalf("move task %+v", task)
	}
}

func TestTaskFailures(t *testing.T) {
	m, clk := newTestMaster(t, Config{LeaseTTL: time.Second}, map[string]uint64{"a": 1 << 20, "b": 1 << 20, "small": 4096})
	mustPut(t, m, "k", 1000, ReplicateConfig{PreferredSegments: []string{"a"}})
	ub := usedOn(m, "b")

	// The executor reports a failure: the target space comes back.
	id, _ := m.CreateCopyTask("k", []string{"b"})
	if len(m.FetchTasks("client-a", 8)) != 1 {
		t.Fatal("not fetched")
	}
	if usedOn(m, "b") <= ub {
		t.Fatal("no target space allocated")
	}
	if err := m.FinishTask("client-a", id, "transfer failed: boom"); err != nil {
		t.Fatal(err)
	}
	if task, _ := m.QueryTask(id); task.Status != TaskFailed || !strings.Contains(task.Message, "boom") || usedOn(m, "b") != ub {
		t.Fatalf("failed task %+v, b uses %d (was %d)", task, usedOn(m, "b"), ub)
	}

	// The object is replaced while it is copied: the copy is refused.
	id, _ = m.CreateCopyTask("k", []string{"b"})
	m.FetchTasks("client-a", 8)
	clk.Advance(2 * time.Second) // past the copy's lease
	if err := m.Remove("k", false); err != nil {
		t.Fatal(err)
	}
	mustPut(t, m, "k", 1000, ReplicateConfig{PreferredSegments: []string{"a"}})
	_ = m.FinishTask("client-a", id, "")
	if task, _ := m.QueryTask(id); task.Status != TaskFailed || !strings.Contains(task.Message, "replaced") {
		t.Fatalf("copy of a replaced object %+v", task)
	}
	if info, _ := m.Query("k"); len(info.Replicas) != 1 || usedOn(m, "b") != ub {
		t.Fatalf("replicas %v, b uses %d (was %d)", segmentsOf(info), usedOn(m, "b"), ub)
	}

	// No room on the target: retried at each fetch, then failed.
	id, _ = m.CreateCopyTask("k", []string{"small"})
	mustPut(t, m, "filler", 3500, ReplicateConfig{PreferredSegments: []string{"small"}})
	for range TaskRetries {
		if as := m.FetchTasks("client-a", 8); len(as) != 0 {
			t.Fatalf("fetched a task without room: %+v", as)
		}
		if task, _ := m.QueryTask(id); task.Status != TaskPending {
			t.Fatalf("task without room %+v", task)
		}
	}
	m.FetchTasks("client-a", 8)
	if task, _ := m.QueryTask(id); task.Status != TaskFailed || !strings.Contains(task.Message, "no space") {
		t.Fatalf("task out of retries %+v", task)
	}

	// Deadlines: one never fetched, one never finished.
	p, _ := m.CreateCopyTask("k", []string{"b"})
	clk.Advance(TaskPendingTimeout + time.Second)
	if task, _ := m.QueryTask(p); task.Status != TaskFailed || task.Message != "pending timeout" {
		t.Fatalf("unfetched task %+v", task)
	}
	q, _ := m.CreateCopyTask("k", []string{"b"})
	m.FetchTasks("client-a", 8)
	clk.Advance(TaskProcessingTimeout + time.Second)
	if task, _ := m.QueryTask(q); task.Status != TaskFailed || task.Message != "processing timeout" {
		t.Fatalf("unfinished task %+v", task)
	}
	if err := m.FinishTask("client-a", q, ""); err != nil { // too late: ignored
		t.Fatal(err)
	}
	if task, _ := m.QueryTask(q); task.Status != TaskFailed {
		t.Fatalf("late finish changed the task: %+v", task)
	}
	// Its space is held while the executor might still write, then freed.
	if usedOn(m, "b") == ub {
		t.Fatal("late task's space freed at once")
	}
	clk.Advance(m.Config().PutTimeout + time.Second)
	for _, c := range []string{"client-a", "client-b", "client-small", "writer"} {
		m.Ping(c)
	}
	m.Tick()
	if usedOn(m, "b") != ub {
		t.Fatalf("late task's space not released: b uses %d (was %d)", usedOn(m, "b"), ub)
	}

	// The executing client dies: its tasks fail.
	r, _ := m.CreateCopyTask("k", []string{"b"})
	clk.Advance(m.Config().ClientTTL + time.Second)
	for _, c := range []string{"client-b", "client-small", "writer"} {
		m.Ping(c)
	}
	m.Tick()
	if task, _ := m.QueryTask(r); task.Status != TaskFailed || !strings.Contains(task.Message, "gone") {
		t.Fatalf("task of a dropped client %+v", task)
	}
}

func TestTaskLimitAndHistory(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	mustPut(t, m, "k", 1000, ReplicateConfig{PreferredSegments: []string{"a"}})
	m.mu.Lock()
	m.tasksLocked().npending = MaxPendingTasks
	m.mu.Unlock()
	if _, err := m.CreateCopyTask("k", []string{"b"}); !errors.Is(err, ErrTaskLimit) || Code(err) != -1401 {
		t.Fatalf("over the pending limit: %v", err)
	}
	m.mu.Lock()
	m.tasks.npending = 0
	m.mu.Unlock()
	mustPut(t, m, "on-b", 1000, ReplicateConfig{PreferredSegments: []string{"b"}})
	if _, err := m.GetReplicaList("on-b"); err != nil { // a lease keeps b draining
		t.Fatal(err)
	}
	if err := m.GracefulUnmount("client-b", "b", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateCopyTask("k", []string{"b"}); !errors.Is(err, ErrUnavailable) || Code(err) != -1010 {
		t.Fatalf("draining target: %v", err)
	}
}

func TestFinishedTasksForgottenOldestFirst(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	mustPut(t, m, "k", 1000, ReplicateConfig{PreferredSegments: []string{"a"}})
	var ids []TaskID
	for _, n := range []int{6000, 5000} {
		for range n {
			id, err := m.CreateCopyTask("k", []string{"b"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		clk.Advance(TaskPendingTimeout + time.Second) // all fail unfetched
		if _, err := m.QueryTask(ids[len(ids)-1]); err != nil {
			t.Fatal(err)
		}
	}
	forgotten := 0
	for i, id := range ids {
		_, err := m.QueryTask(id)
		switch {
		case errors.Is(err, ErrTaskNotFound) && i < 6000:
			forgotten++
		case err != nil:
			t.Fatalf("task %d: %v", i, err)
		}
	}
	if forgotten != len(ids)-MaxFinishedTasks {
		t.Fatalf("%d of the first batch forgotten, want %d", forgotten, len(ids)-MaxFinishedTasks)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.tasks.all); n != MaxFinishedTasks || len(m.tasks.active) != 0 || m.tasks.npending != 0 {
		t.Fatalf("table holds %d tasks, %d active, %d pending", n, len(m.tasks.active), m.tasks.npending)
	}
}

// addTaskSpace adds the target space of tasks being executed to used
// (checkInvariants).
func addTaskSpace(m *Master, used map[*segment]uint64) {
	if m.tasks == nil {
		return
	}
	for _, t := range m.tasks.active {
		for _, r := range t.targets {
			if m.segments[r.seg.spec.Name] == r.seg {
				used[r.seg] += r.seg.alloc.Rounded(t.asize)
			}
		}
	}
}
