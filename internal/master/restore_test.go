package master

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
)

// held turns what a durable master knows into the reports the nodes would
// send after its restart (as if each scanned its memory).
func held(t *testing.T, m *Master, keys ...string) map[string][]HeldObject {
	t.Helper()
	out := map[string][]HeldObject{}
	for _, k := range keys {
		info, err := m.Query(k)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range info.Replicas {
			si, _ := m.Segment(r.Segment)
			out[r.Segment] = append(out[r.Segment], HeldObject{Segment: r.Segment, Offset: r.Addr - r.HeaderLen - si.Base,
				Key: k, Size: info.Size, CRC: info.CRC, Seq: r.Seq, HardPin: info.HardPin})
		}
	}
	return out
}

func specs(t *testing.T, m *Master) map[string]SegmentSpec {
	out := map[string]SegmentSpec{}
	for _, s := range m.Segments() {
		out[s.Name] = s.SegmentSpec
	}
	return out
}

func TestRestoreAfterRestart(t *testing.T) {
	segs := map[string]uint64{"a": 1 << 20, "b": 1 << 20}
	old, clk := newTestMaster(t, Config{Durable: true}, segs)
	mustPut(t, old, "both", 5000, ReplicateConfig{Replicas: 2})
	mustPut(t, old, "pinned", 3000, ReplicateConfig{HardPin: true})
	mustPut(t, old, "gone", 3000, ReplicateConfig{})
	reports := held(t, old, "both", "pinned", "gone")
	tombs, err := old.RemoveHeaders("gone", false)
	if err != nil || len(tombs) != 1 || tombs[0].Seq == 0 {
		t.Fatalf("remove: %v %+v", err, tombs)
	}
	sp := specs(t, old)
	usedBefore := old.Stats().Used - old.Config().Align // less the tombstone of "gone"

	clk.Advance(time.Second)
	m, err := New(Config{Durable: true}, clk)
	if err != nil {
		t.Fatal(err)
	}
	// "gone" was zeroed by the removing client: the node no longer reports it.
	for _, name := range []string{"a", "b"} {
		var rs []HeldObject
		for _, h := range reports[name] {
			if h.Key != "gone" {
				rs = append(rs, h)
			}
		}
		res, err := m.Restore("client-"+name, []SegmentSpec{sp[name]}, rs)
		if err != nil || res.Dropped != 0 || res.Restored != len(rs) {
			t.Fatalf("restore %s: %+v %v", name, res, err)
		}
	}
	info, err := m.GetReplicaList("both")
	if err != nil || len(info.Replicas) != 2 || info.CRC != 42 || info.Size != 5000 {
		t.Fatalf("both: %+v %v", info, err)
	}
	if info, _ := m.Query("pinned"); !info.HardPin {
		t.Fatal("hard pin lost")
	}
	if ok, _ := m.Exist("gone"); ok {
		t.Fatal("removed object came back")
	}
	if got := m.Stats().Used; got != usedBefore {
		t.Fatalf("used after restore %d, before %d", got, usedBefore)
	}
	// New puts land outside the restored objects and get newer sequence numbers.
	for i := range 100 {
		reps := mustPut(t, m, fmt.Sprint("new", i), 4000, ReplicateConfig{})
		if reps[0].Seq <= info.Replicas[0].Seq {
			t.Fatalf("sequence number went back: %d <= %d", reps[0].Seq, info.Replicas[0].Seq)
		}
	}
	checkNoOverlap(t, m)
	// Remounting again (a repeated remount) does not restore twice.
	res, err := m.Restore("client-a", []SegmentSpec{sp["a"]}, reports["a"])
	if err != nil || res.Restored != 0 {
		t.Fatalf("second restore: %+v %v", res, err)
	}
}

// checkNoOverlap fails when two replicas overlap in a segment.
func checkNoOverlap(t *testing.T, m *Master) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	type rng struct{ off, end uint64 }
	per := map[*segment][]rng{}
	for _, o := range allObjects(m) {
		for _, r := range m.reps(o) {
			per[m.segOf(r)] = append(per[m.segOf(r)], rng{r.off, r.off + o.alloc()})
		}
	}
	for s, rs := range per {
		slices.SortFunc(rs, func(a, b rng) int { return int(a.off) - int(b.off) })
		for i := 1; i < len(rs); i++ {
			if rs[i].off < rs[i-1].end {
				t.Fatalf("segment %s: [%d,%d) overlaps [%d,%d)", s.spec.Name, rs[i-1].off, rs[i-1].end, rs[i].off, rs[i].end)
			}
		}
	}
}

func TestRestoreConflicts(t *testing.T) {
	clk := newFakeClock()
	m, err := New(Config{Durable: true}, clk)
	if err != nil {
		t.Fatal(err)
	}
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: 1 << 20}
	h := func(off uint64, key string, seq uint64) HeldObject {
		return HeldObject{Segment: "a", Offset: off, Key: key, Size: 1000, CRC: 1, Seq: seq}
	}
	res, err := m.Restore("c", []SegmentSpec{spec}, []HeldObject{
		h(0, "k", 10),    // older version of k
		h(4096, "k", 20), // newer: wins
		h(8192, "x", 5),  // overlapped by y, newer
		h(8192+512, "y", 6),
		h(100, "bad", 1),   // misaligned
		h(1<<20, "out", 1), // outside the segment
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Restored != 2 || res.Dropped != 4 || len(res.Tombstones) != 2 {
		t.Fatalf("restore: %+v", res)
	}
	info, _ := m.Query("k")
	if len(info.Replicas) != 1 || info.Replicas[0].Seq != 20 {
		t.Fatalf("k: %+v", info)
	}
	if ok, _ := m.Exist("x"); ok {
		t.Fatal("overlapped older object restored")
	}
	// The node zeroes the refused header and says so: its space is freed.
	used := m.Stats().Used
	_, st, todo := m.Heartbeat("c", res.Tombstones)
	if st != PingOK || len(todo) != 0 || m.Stats().Used != used-128 {
		t.Fatalf("heartbeat: %v %+v used %d", st, todo, m.Stats().Used)
	}

	// A key put and removed on this master while a node was away: the node's
	// older copy does not come back when it remounts.
	spec2 := SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 2 << 30, Size: 1 << 20}
	mustPut(t, m, "late", 100, ReplicateConfig{})
	if err := m.Remove("late", false); err != nil {
		t.Fatal(err)
	}
	res, _ = m.Restore("d", []SegmentSpec{spec2}, []HeldObject{{Segment: "b", Offset: 0, Key: "late", Size: 100, CRC: 1, Seq: 3},
		{Segment: "b", Offset: 4096, Key: "k", Size: 1000, CRC: 1, Seq: 20}})
	if ok, _ := m.Exist("late"); ok || res.Restored != 1 {
		t.Fatalf("late node: %+v", res)
	}
	if info, _ := m.Query("k"); len(info.Replicas) != 2 {
		t.Fatalf("second replica of k not taken over: %+v", info)
	}
}

func TestTombstonesZeroedThroughHeartbeat(t *testing.T) {
	m, clk := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 64 << 10})
	for i := range 10 {
		mustPut(t, m, fmt.Sprint(i), 3000, ReplicateConfig{})
	}
	m.RemoveAll(false) // names its 10 tombstones to the remover
	mustPut(t, m, "u", 3000, ReplicateConfig{})
	if _, err := m.Upsert("w", "u", 5000, ReplicateConfig{}); err != nil { // new size: the old copy is freed
		t.Fatal(err)
	}
	if got := len(m.Tombstones()); got != 11 {
		t.Fatalf("%d tombstones, want 11", got)
	}
	_, _, todo := m.Heartbeat("client-a", nil)
	if len(todo) != 11 {
		t.Fatalf("heartbeat todo %d", len(todo))
	}
	m.Heartbeat("client-a", todo)
	if got := len(m.Tombstones()); got != 0 {
		t.Fatalf("%d tombstones left", got)
	}
	// The remover may still write zeros over the 10 it was named: their
	// bytes stay allocated until the fence ends; the upsert's old copy,
	// named to nobody, is free at once.
	fenced := allocSize(m.Config(), "u", 5000) + 10*m.Config().Align
	if st := m.Stats(); st.Used != fenced {
		t.Fatalf("used %d after zeroing, want %d (fenced tombstones)", st.Used, fenced)
	}
	clk.Advance(objheader.ZeroFence - time.Millisecond)
	if m.Heartbeat("client-a", nil); m.Stats().Used != fenced {
		t.Fatalf("used %d before the fence ended", m.Stats().Used)
	}
	clk.Advance(time.Millisecond)
	m.Heartbeat("client-a", nil)
	info, _ := m.Query("u")
	if st := m.Stats(); st.Used != allocSize(m.Config(), "u", 5000) || len(info.Replicas) != 1 {
		t.Fatalf("used %d after zeroing", st.Used)
	}
}
