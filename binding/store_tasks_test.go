package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

// TestStoreTasksInProcess drives replica clear and copy/move tasks through
// the binding's store layer: the JSON it hands to Python and the codes of
// the failures.
func TestStoreTasksInProcess(t *testing.T) {
	s := inProcessStore(t)
	if raw, err := s.replicaClear(nil, ""); err != nil || string(raw) != "[]" {
		t.Fatalf("clear of no keys: %s %v", raw, err)
	}
	if err := s.put("k", []byte("value"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Just written: in use, so nothing is cleared.
	if raw, err := s.replicaClear([]string{"k", "missing"}, ""); err != nil || string(raw) != "[]" {
		t.Fatalf("clear of a fresh key: %s %v", raw, err)
	}
	info, err := s.c.Stat(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	node := info.Replicas[0].Segment

	// A copy onto the segment that holds the key already: done, nothing added.
	id, err := s.createCopyTask("k", []string{node})
	if err != nil || id == (store.TaskID{}) {
		t.Fatalf("copy task: %v %v", id, err)
	}
	var task taskJSON
	waitfor.Cond(t, 10*time.Second, "the copy task finished", func() bool {
		raw, err := s.queryTask(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &task); err != nil {
			t.Fatal(err)
		}
		return task.Status == int(store.TaskSuccess) || task.Status == int(store.TaskFailed)
	})
	if task.Status != int(store.TaskSuccess) || task.Key != "k" || task.Source != node || task.Hi != id.Hi || task.CreatedMs == 0 {
		t.Fatalf("task %+v", task)
	}

	for _, tc := range []struct {
		name string
		err  error
		code int64
	}{
		{"move onto its own segment", func() error { _, err := s.createMoveTask("k", node, node); return err }(), codeInvalidParams},
		{"copy of a missing key", func() error { _, err := s.createCopyTask("nope", []string{node}); return err }(), codeObjectNotFound},
		{"unknown task", func() error { _, err := s.queryTask(store.TaskID{Hi: 1, Lo: 2}); return err }(), -1400},
		{"zero task id", func() error { _, err := s.queryTask(store.TaskID{}); return err }(), codeInvalidParams},
		{"dummy client", errNotSupported("x"), codeNotSupported},
	} {
		if got := codeOf(tc.err); got != tc.code {
			t.Errorf("%s: code %d (%v), want %d", tc.name, got, tc.err, tc.code)
		}
	}
}

// TestStoreTasksDummy: a dummy client's task calls go to its real client;
// its replica clear answers NOT_SUPPORTED.
func TestStoreTasksDummy(t *testing.T) {
	real := inProcessStore(t)
	addr := serveDummy(t, real)
	d, err := openDummy(t.Context(), 4<<20, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()

	if err := d.put("dk", []byte("dummy value"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := real.c.Stat(t.Context(), "dk")
	if err != nil {
		t.Fatal(err)
	}
	id, err := d.createCopyTask("dk", []string{info.Replicas[0].Segment})
	if err != nil || id == (store.TaskID{}) {
		t.Fatalf("copy task through a dummy: %v %v", id, err)
	}
	raw, err := d.queryTask(id)
	var task taskJSON
	if err != nil || json.Unmarshal(raw, &task) != nil || task.Key != "dk" || task.Hi != id.Hi || task.Lo != id.Lo {
		t.Fatalf("query through a dummy: %s %v", raw, err)
	}
	if _, err := d.queryTask(store.TaskID{Hi: 5, Lo: 5}); codeOf(err) != -1400 {
		t.Fatalf("unknown task through a dummy: %v (code %d)", err, codeOf(err))
	}
	if _, err := d.createMoveTask("dk", "a", "a"); codeOf(err) != codeInvalidParams {
		t.Fatalf("bad move through a dummy: %v (code %d)", err, codeOf(err))
	}
	if _, err := d.replicaClear([]string{"dk"}, ""); codeOf(err) != codeNotSupported {
		t.Fatalf("replica clear on a dummy: %v", err)
	}
}
