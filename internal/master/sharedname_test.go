package master

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// sharedNameMaster mounts, as Mooncake's test_batch_replica_clear ends up
// doing, two clients' segments under one name ("h:1", endpoints e1 and e2)
// and a third client's under "h:2".
func sharedNameMaster(t *testing.T, cfg Config) *Master {
	t.Helper()
	m, err := New(cfg, newFakeClock())
	if err != nil {
		t.Fatal(err)
	}
	for i, mnt := range []struct{ client, name, ep string }{{"c1", "h:1", "e1"}, {"c2", "h:1", "e2"}, {"c3", "h:2", "e3"}} {
		spec := SegmentSpec{Name: mnt.name, Endpoint: mnt.ep, Base: uint64(i+1) << 30, Size: 1 << 20}
		if err := m.MountSegment(mnt.client, spec); err != nil {
			t.Fatalf("mount %+v: %v", mnt, err)
		}
	}
	return m
}

func segNames(reps []Replica) []string {
	var out []string
	for _, r := range reps {
		out = append(out, r.Segment)
	}
	slices.Sort(out)
	return out
}

func TestSharedSegmentNameMount(t *testing.T) {
	m := sharedNameMaster(t, Config{})
	segs := m.Segments()
	if len(segs) != 3 || segs[0].Name != "h:1" || segs[1].Name != "h:1" || segs[2].Name != "h:2" ||
		segs[0].Client == segs[1].Client {
		t.Fatalf("segments %+v", segs)
	}
	if st := m.Stats(); st.Segments != 3 {
		t.Fatalf("stats %+v", st)
	}
	// The same client may not mount a second, different segment under a name.
	if err := m.MountSegment("c2", SegmentSpec{Name: "h:1", Endpoint: "e9", Base: 1 << 40, Size: 1 << 20}); !errors.Is(err, ErrSegmentExists) {
		t.Fatalf("second segment of c2 under h:1: %v", err)
	}
	// Remounting the same spec is a no-op.
	if err := m.RemountSegments("c2", []SegmentSpec{segs[1].SegmentSpec}); err != nil || len(m.Segments()) != 3 {
		t.Fatalf("remount: %v, %d segments", err, len(m.Segments()))
	}
	if si, err := m.Segment("h:1"); err != nil || si.Name != "h:1" {
		t.Fatalf("Segment(h:1) = %+v, %v", si, err)
	}
	if si, err := m.ClientSegment("c2", "h:1"); err != nil || si.Client != "c2" || si.Endpoint != "e2" {
		t.Fatalf("ClientSegment(c2, h:1) = %+v, %v", si, err)
	}
	if _, err := m.ClientSegment("c3", "h:1"); !errors.Is(err, ErrSegmentNotFound) {
		t.Fatalf("ClientSegment(c3, h:1): %v", err)
	}
	// c1 unmounts its own segment; c2's under the same name stays.
	if err := m.UnmountSegment("c3", "h:1"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("unmount by a client without a segment of that name: %v", err)
	}
	if err := m.UnmountSegment("c1", "h:1"); err != nil {
		t.Fatal(err)
	}
	segs = m.Segments()
	if len(segs) != 2 || segs[0].Name != "h:1" || segs[0].Client != "c2" {
		t.Fatalf("after c1's unmount: %+v", segs)
	}
	// A new c1 mounts again (under the plain key, now free): both back.
	if err := m.MountSegment("c1", SegmentSpec{Name: "h:1", Endpoint: "e1", Base: 1 << 30, Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := m.MountSegment("c4", SegmentSpec{Name: "h:1", Endpoint: "e4", Base: 1 << 34, Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if n := len(m.Segments()); n != 4 {
		t.Fatalf("%d segments, want 4", n)
	}
}

func TestSharedSegmentNameStaleEndpoint(t *testing.T) {
	m := sharedNameMaster(t, Config{})
	reps, err := m.PutStart("c2", "k", 100, ReplicateConfig{PreferredSegments: []string{"h:1"}})
	if err != nil || len(reps) != 1 || reps[0].Endpoint != "e2" {
		t.Fatalf("preferred h:1 from c2: %+v %v (want c2's own segment)", reps, err)
	}
	if err := m.PutEnd("c2", "k", 1); err != nil {
		t.Fatal(err)
	}
	// A restarted c2 (new client id, same endpoint) replaces the stale
	// segment: its replica is gone, c1's segment under the name stays.
	if err := m.MountSegment("c2-new", SegmentSpec{Name: "h:1", Endpoint: "e2", Base: 1 << 35, Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.Exist("k"); ok {
		t.Fatal("replica on the stale segment survived its replacement")
	}
	var clients []string
	for _, s := range m.Segments() {
		if s.Name == "h:1" {
			clients = append(clients, s.Client)
		}
	}
	slices.Sort(clients)
	if !slices.Equal(clients, []string{"c1", "c2-new"}) {
		t.Fatalf("h:1 owners %v", clients)
	}
}

func TestSharedSegmentNamePlacement(t *testing.T) {
	for _, strat := range []Strategy{StrategyRandom, StrategyFreeRatioFirst, StrategyLocalFirst} {
		t.Run(string(strat), func(t *testing.T) {
			m := sharedNameMaster(t, Config{Strategy: strat})
			for i := range 20 {
				key := string(rune('a' + i))
				reps, err := m.PutStart("c1", key, 100, ReplicateConfig{Replicas: 3})
				if err != nil {
					t.Fatal(err)
				}
				// Two names: at most two replicas, one under each.
				if got := segNames(reps); !slices.Equal(got, []string{"h:1", "h:2"}) {
					t.Fatalf("%s on %v, want one replica under each name", key, got)
				}
			}
		})
	}
}

func TestSharedSegmentNameReplicaClear(t *testing.T) {
	m := sharedNameMaster(t, Config{})
	clk := m.clock.(interface{ Advance(time.Duration) })
	// c3 puts two replicas: one under each name (on c1's or c2's segment
	// under h:1), then clears the key's copies under the name h:1.
	if reps := mustPutAs(t, m, "c3", "k", ReplicateConfig{Replicas: 2}); !slices.Equal(segNames(reps), []string{"h:1", "h:2"}) {
		t.Fatalf("k on %+v", reps)
	}
	clk.Advance(time.Minute) // past the lease of the put
	cleared, _, err := m.BatchReplicaClear("c3", []string{"k"}, "h:1")
	if err != nil || !slices.Equal(cleared, []string{"k"}) {
		t.Fatalf("clear on h:1: %v %v", cleared, err)
	}
	info, err := m.GetReplicaList("k")
	if err != nil || !slices.Equal(segNames(info.Replicas), []string{"h:2"}) {
		t.Fatalf("after clearing h:1: %+v %v", info, err)
	}
}

func TestSharedSegmentNameTasks(t *testing.T) {
	m := sharedNameMaster(t, Config{})
	mustPutAs(t, m, "c3", "k", ReplicateConfig{PreferredSegments: []string{"h:2"}})
	// Move from h:2 to the name h:1: lands on a segment of that name.
	id, err := m.CreateMoveTask("k", "h:2", "h:1")
	if err != nil {
		t.Fatal(err)
	}
	as := m.FetchTasks("c3", 8)
	if len(as) != 1 || len(as[0].To) != 1 || as[0].To[0].Segment != "h:1" {
		t.Fatalf("move assignment %+v", as)
	}
	if err := m.FinishTask("c3", id, ""); err != nil {
		t.Fatal(err)
	}
	if task, _ := m.QueryTask(id); task.Status != TaskSuccess {
		t.Fatalf("move %+v", task)
	}
	info, err := m.GetReplicaList("k")
	if err != nil || !slices.Equal(segNames(info.Replicas), []string{"h:1"}) {
		t.Fatalf("after the move: %+v %v", info, err)
	}
	// A target name whose segments all drain is unavailable.
	for _, c := range []string{"c1", "c2"} {
		if err := m.GracefulUnmount(c, "h:1", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.CreateCopyTask("k", []string{"h:1"}); !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("copy to a draining name: %v", err)
	}
}

func mustPutAs(t *testing.T, m *Master, client, key string, rc ReplicateConfig) []Replica {
	t.Helper()
	reps, err := m.PutStart(client, key, 100, rc)
	if err != nil {
		t.Fatalf("PutStart %q: %v", key, err)
	}
	if err := m.PutEnd(client, key, 42); err != nil {
		t.Fatalf("PutEnd %q: %v", key, err)
	}
	return reps
}
