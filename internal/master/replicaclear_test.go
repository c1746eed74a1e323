package master

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func usedOn(m *Master, name string) uint64 {
	si, err := m.Segment(name)
	if err != nil {
		return 0
	}
	return si.Used
}

func segmentsOf(info ObjectInfo) []string {
	var out []string
	for _, r := range info.Replicas {
		out = append(out, r.Segment)
	}
	slices.Sort(out)
	return out
}

func TestBatchReplicaClear(t *testing.T) {
	cfg := Config{LeaseTTL: time.Second}
	m, clk := newTestMaster(t, cfg, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	mustPut(t, m, "old", 1000, ReplicateConfig{Replicas: 2})
	mustPut(t, m, "other", 1000, ReplicateConfig{})
	if _, err := m.PutStart("someone-else", "theirs", 1000, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := m.PutEnd("someone-else", "theirs", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutStart("writer", "unfinished", 1000, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}

	// Just written: in use for one lease TTL.
	got, _, err := m.BatchReplicaClear("writer", []string{"old"}, "")
	if err != nil || len(got) != 0 {
		t.Fatalf("fresh object cleared: %v %v", got, err)
	}
	clk.Advance(1500 * time.Millisecond)
	mustPut(t, m, "fresh", 1000, ReplicateConfig{})
	if _, err := m.GetReplicaList("other"); err != nil { // a read lease
		t.Fatal(err)
	}
	got, tombs, err := m.BatchReplicaClear("writer", []string{"", "old", "fresh", "other", "theirs", "unfinished", "missing"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"old"}) || len(tombs) != 0 {
		t.Fatalf("cleared %v (tombs %v), want [old]", got, tombs)
	}
	if _, err := m.Query("old"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("old still there: %v", err)
	}
	if _, _, err := m.BatchReplicaClear("", []string{"x"}, ""); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("empty client id: %v", err)
	}

	// One segment: only that replica goes, and the key stays readable.
	clk.Advance(2 * time.Second)
	mustPut(t, m, "rep", 1000, ReplicateConfig{Replicas: 2})
	clk.Advance(2 * time.Second)
	ua := usedOn(m, "a")
	got, _, _ = m.BatchReplicaClear("writer", []string{"rep"}, "nowhere:1")
	if len(got) != 0 {
		t.Fatalf("cleared on a segment without a replica: %v", got)
	}
	got, _, _ = m.BatchReplicaClear("writer", []string{"rep"}, "a")
	if !slices.Equal(got, []string{"rep"}) {
		t.Fatalf("cleared %v, want [rep]", got)
	}
	info, err := m.GetReplicaList("rep")
	if err != nil || !slices.Equal(segmentsOf(info), []string{"b"}) {
		t.Fatalf("rep after clearing a: %v %v", segmentsOf(info), err)
	}
	if usedOn(m, "a") >= ua {
		t.Fatalf("segment a still uses %d bytes (was %d)", usedOn(m, "a"), ua)
	}
	// The last replica: the object goes.
	clk.Advance(2 * time.Second)
	got, _, _ = m.BatchReplicaClear("writer", []string{"rep"}, "b")
	if !slices.Equal(got, []string{"rep"}) {
		t.Fatalf("cleared %v, want [rep]", got)
	}
	if _, err := m.Query("rep"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("rep without replicas still there: %v", err)
	}
	if n := m.Stats().Objects; n != 3 { // other, theirs, fresh
		t.Fatalf("objects = %d, want 3", n)
	}
}

func TestBatchReplicaClearDurableTombstones(t *testing.T) {
	m, clk := newTestMaster(t, Config{Durable: true, LeaseTTL: time.Second}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	mustPut(t, m, "k", 1000, ReplicateConfig{Replicas: 2})
	clk.Advance(2 * time.Second)
	got, tombs, err := m.BatchReplicaClear("writer", []string{"k"}, "b")
	if err != nil || !slices.Equal(got, []string{"k"}) {
		t.Fatalf("cleared %v %v", got, err)
	}
	if len(tombs) != 1 || tombs[0].Segment != "b" {
		t.Fatalf("tombstones %+v, want one on b", tombs)
	}
	got, tombs, _ = m.BatchReplicaClear("writer", []string{"k"}, "")
	if !slices.Equal(got, []string{"k"}) || len(tombs) != 2 {
		t.Fatalf("clear all: %v, tombstones %+v (want both headers)", got, tombs)
	}
}
