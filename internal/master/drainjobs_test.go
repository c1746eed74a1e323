package master

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// A drain job moves every object off its segment, one move at a time
// (max concurrency 1), keeps new puts off it, and ends SUCCEEDED with the
// segment DRAINED.
func TestDrainJob(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20, "c": 1 << 20})
	for i := range 5 {
		mustPut(t, m, fmt.Sprintf("k%d", i), 1000, ReplicateConfig{PreferredSegments: []string{"a"}})
	}
	for _, bad := range []struct {
		segs, targets []string
		want          error
	}{
		{nil, []string{"b"}, ErrInvalidParams},
		{[]string{"zz"}, []string{"b"}, ErrSegmentNotFound},
		{[]string{"a"}, []string{"zz"}, ErrSegmentNotFound},
		{[]string{"a"}, []string{"a"}, ErrInvalidParams},
	} {
		if _, err := m.CreateDrainJob(bad.segs, bad.targets, 1); !errors.Is(err, bad.want) {
			t.Fatalf("CreateDrainJob(%v, %v): %v, want %v", bad.segs, bad.targets, err, bad.want)
		}
	}
	if st, _ := m.SegmentDrainStatus("a"); st != "OK" {
		t.Fatalf("status before a job: %q", st)
	}
	id, err := m.CreateDrainJob([]string{"a"}, []string{"b"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateDrainJob([]string{"a"}, []string{"c"}, 1); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("second job on a draining segment: %v", err)
	}
	if st, _ := m.SegmentDrainStatus("a"); st != "DRAINING" {
		t.Fatalf("status while draining: %q", st)
	}
	// a put preferring the draining segment lands elsewhere
	reps := mustPut(t, m, "new", 1000, ReplicateConfig{PreferredSegments: []string{"a"}})
	if reps[0].Segment == "a" {
		t.Fatal("a new replica went to the draining segment")
	}
	for step := 0; ; step++ {
		j, err := m.DrainJobInfo(id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == DrainSucceeded {
			if j.TotalUnits != 5 || j.SucceededUnits != 5 || j.ActiveUnits != 0 || step != 5 {
				t.Fatalf("finished job %+v after %d moves", j, step)
			}
			break
		}
		if step >= 5 || j.ActiveUnits != 1 {
			t.Fatalf("job %+v at step %d", j, step)
		}
		as := m.FetchTasks("client-a", 8)
		if len(as) != 1 || as[0].To[0].Segment != "b" {
			t.Fatalf("step %d: assignments %+v (max concurrency 1)", step, as)
		}
		if err := m.FinishTask("client-a", as[0].ID, ""); err != nil {
			t.Fatal(err)
		}
		m.Tick()
	}
	if st, _ := m.SegmentDrainStatus("a"); st != "DRAINED" {
		t.Fatalf("status after the job: %q", st)
	}
	for i := range 5 {
		info, _ := m.Query(fmt.Sprintf("k%d", i))
		if !slices.Equal(segmentsOf(info), []string{"b"}) {
			t.Fatalf("k%d on %v after the drain", i, segmentsOf(info))
		}
	}
	if _, err := m.DrainJobInfo("drain-99"); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("unknown job: %v", err)
	}
}

// Moves that keep failing fail the job after the attempts allowed.
func TestDrainJobFails(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	mustPut(t, m, "k", 1000, ReplicateConfig{PreferredSegments: []string{"a"}})
	id, err := m.CreateDrainJob([]string{"a"}, []string{"b"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	for range drainUnitAttempts {
		as := m.FetchTasks("client-a", 8)
		if len(as) != 1 {
			t.Fatalf("assignments %+v", as)
		}
		if err := m.FinishTask("client-a", as[0].ID, "transfer failed: boom"); err != nil {
			t.Fatal(err)
		}
		m.Tick()
	}
	j, _ := m.DrainJobInfo(id)
	if j.Status != DrainFailed || j.FailedUnits != 1 || j.Message == "" {
		t.Fatalf("job after failing moves: %+v", j)
	}
	if st, _ := m.SegmentDrainStatus("a"); st != "FAILED" {
		t.Fatalf("segment status: %q", st)
	}
}
