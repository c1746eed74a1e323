package master

import (
	"errors"
	"testing"
)

// TestGetReplicaListIf: a cached version is confirmed while it is the
// key's current one (no replicas, no lease, counted and touched), and
// every change of the value (an upsert in place or resized, a remove and
// put again, a master restart) answers as GetReplicaList with a new
// version.
func TestGetReplicaListIf(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20})
	mustPut(t, m, "k", 1000, ReplicateConfig{})
	q, _ := m.Query("k")
	full, err := m.GetReplicaList("k")
	if err != nil || full.Seq == 0 || full.View == 0 || full.Unchanged || len(full.Replicas) != 1 {
		t.Fatalf("GetReplicaList: %+v %v", full, err)
	}
	clk.Advance(m.Config().LeaseTTL + 1) // the lease above ends
	before := m.Stats()
	atime := q.LastAccess
	got, err := m.GetReplicaListIf("k", full.View, full.Seq)
	if err != nil || !got.Unchanged || got.Seq != full.Seq || got.Size != 1000 || got.CRC != 42 || len(got.Replicas) != 0 || got.LeaseTTL != 0 {
		t.Fatalf("current version: %+v %v", got, err)
	}
	if st := m.Stats(); st.Gets != before.Gets+1 || st.CachedGets != before.CachedGets+1 {
		t.Fatalf("stats %+v", st)
	}
	if info, _ := m.Query("k"); !info.LastAccess.After(atime) || info.LeaseUntil.After(clk.Now()) {
		t.Fatalf("confirmed read: last access %v (was %v), lease until %v (now %v)", info.LastAccess, atime, info.LeaseUntil, clk.Now())
	}
	if err := m.Remove("k", false); err != nil { // no lease was taken
		t.Fatalf("remove after a confirmed read: %v", err)
	}
	if _, err := m.GetReplicaListIf("k", full.View, full.Seq); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("removed key: %v", err)
	}
	mustPut(t, m, "k", 1000, ReplicateConfig{})
	again, err := m.GetReplicaListIf("k", full.View, full.Seq)
	if err != nil || again.Unchanged || again.Seq <= full.Seq || len(again.Replicas) != 1 || again.LeaseTTL == 0 {
		t.Fatalf("put again: %+v %v", again, err)
	}
	clk.Advance(m.Config().LeaseTTL + 1)
	if _, err := m.Upsert("w", "k", 1000, ReplicateConfig{}); err != nil { // same size: in place
		t.Fatal(err)
	}
	if _, err := m.GetReplicaListIf("k", again.View, again.Seq); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("during an upsert: %v", err)
	}
	if err := m.PutEnd("w", "k", 43); err != nil {
		t.Fatal(err)
	}
	up, err := m.GetReplicaListIf("k", again.View, again.Seq)
	if err != nil || up.Unchanged || up.Seq <= again.Seq || up.CRC != 43 {
		t.Fatalf("after an in-place upsert: %+v %v", up, err)
	}
	if got, _ := m.GetReplicaListIf("k", up.View+1, up.Seq); got.Unchanged {
		t.Fatal("another master's view confirmed")
	}
	if got, _ := m.GetReplicaListIf("k", up.View, 0); got.Unchanged {
		t.Fatal("seq 0 confirmed")
	}
}
