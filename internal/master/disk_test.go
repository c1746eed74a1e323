package master

import (
	"fmt"
	"testing"
	"time"
)

// TestOffloadOnEvictAndPromote drives the disk tier protocol with a fake
// node: watermark evictions on an offload segment become offload
// tombstones; once the node reports the copy and the zeroed header the
// space is free and gets are answered with the disk copy (promotion asked);
// a new put of the key and a remove drop the copy and tell the node.
func TestOffloadOnEvictAndPromote(t *testing.T) {
	clk := newFakeClock()
	m, err := New(Config{Durable: true, HighWatermark: 0.5, EvictionRatio: 0.25}, clk)
	if err != nil {
		t.Fatal(err)
	}
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: 64 << 10, DiskURL: "http://node-a", OffloadOnEvict: true, PromotionOnHit: true}
	if err := m.MountSegment("node", spec); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		mustPut(t, m, fmt.Sprint("k", i), 4000, ReplicateConfig{})
		clk.Advance(time.Millisecond)
	}
	m.Tick() // above the watermark: evicts, offloading
	_, _, todo := m.Heartbeat("node", nil)
	if len(todo) == 0 || !todo[0].Offload {
		t.Fatalf("no offload tombstones: %+v", todo)
	}
	usedBefore := m.Stats().Used
	var onDisk []HeldObject
	for _, r := range todo {
		onDisk = append(onDisk, HeldObject{Segment: "a", Key: m.tombKeyAt("a", r.Offset), Seq: r.Seq, Size: 4000, CRC: 42, Disk: true})
	}
	if rm := m.DiskSync("node", onDisk, nil); len(rm) != 0 {
		t.Fatalf("disk removals: %+v", rm)
	}
	m.Heartbeat("node", todo)
	if st := m.Stats(); st.Used >= usedBefore || st.DiskObjects != len(todo) {
		t.Fatalf("after offload: %+v", st)
	}
	k := onDisk[0].Key
	info, err := m.GetReplicaList(k)
	if err != nil || len(info.Replicas) != 0 || len(info.Disk) != 1 || info.Disk[0].URL != "http://node-a" || !info.Promote || info.CRC != 42 {
		t.Fatalf("get of an offloaded key: %+v %v", info, err)
	}
	// Promotion: the reader puts it back; the disk copy is dropped.
	mustPut(t, m, k, 4000, ReplicateConfig{})
	if info, _ := m.GetReplicaList(k); len(info.Replicas) != 1 || len(info.Disk) != 0 {
		t.Fatalf("after promotion: %+v", info)
	}
	rm := m.DiskSync("node", nil, nil)
	if len(rm) != 1 || rm[0].Key != k {
		t.Fatalf("node not told to delete the old copy: %+v", rm)
	}
	// Remove of a disk-only key.
	k2 := onDisk[1].Key
	if err := m.Remove(k2, false); err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.Exist(k2); ok {
		t.Fatal("removed disk copy still exists")
	}
	if rm := m.DiskSync("node", nil, nil); len(rm) != 1 || rm[0].Key != k2 {
		t.Fatalf("disk removal: %+v", rm)
	}
	// A late report of the removed copy does not bring it back.
	if rm := m.DiskSync("node", []HeldObject{onDisk[1]}, nil); len(rm) != 1 {
		t.Fatalf("removed copy re-reported: %+v", rm)
	}
	// The node dropped a copy for capacity.
	k3 := onDisk[2].Key
	m.DiskSync("node", nil, []HeldObject{onDisk[2]})
	if ok, _ := m.Exist(k3); ok {
		t.Fatal("dropped disk copy still exists")
	}
	// Synchronous eviction (a put needing room) does not offload.
	for i := range 40 {
		mustPut(t, m, fmt.Sprint("fill", i), 4000, ReplicateConfig{})
	}
	for _, r := range m.Tombstones() {
		if r.Offload && m.tombKeyAt("a", r.Offset)[:4] == "fill" {
			t.Fatalf("synchronous eviction offloaded %+v", r)
		}
	}
}

// tombKeyAt is the key of the tombstone at off in segment seg (tests).
func (m *Master) tombKeyAt(seg string, off uint64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.namedLocked(seg) { // segments of several clients may share the name
		if tb, ok := s.tombs[off]; ok {
			return tb.key
		}
	}
	return ""
}
