package master

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/tenant"
)

// checkInvariants verifies the core's bookkeeping: every segment's used
// bytes equal its replicas plus zombie space, key sets match replicas,
// replicas of one object sit on segments of distinct names, every segment is
// filed under its key, in segOrder and in its client's map, and the pending
// set is exactly the unfinished puts.
// checkDirty: a segment's dirty bytes are its dirty extents' lengths, and
// its owners' index holds exactly its waiting extents with an owner.
func checkDirty(t *testing.T, s *segment) {
	t.Helper()
	var n, held uint64
	fit := 0
	inHeap := map[heldRef]bool{}
	for _, h := range s.held {
		inHeap[h] = true
	}
	for _, h := range s.aging[s.agingHead:] {
		inHeap[h] = true
	}
	for off, d := range s.dirty {
		n += d.n
		if d.held {
			held += d.n
		}
		if n, in := s.ready[off]; in != d.ready || (in && n != d.n) {
			t.Fatalf("segment %s: dirty extent at %d (%+v) in the ready set: %v", s.spec.Name, off, d, in)
		}
		if !d.ready && !inHeap[heldRef{until: d.until, off: off}] {
			t.Fatalf("segment %s: waiting dirty extent at %d (%+v) in neither the queue nor the heap", s.spec.Name, off, d)
		}
		if d.ready && d.held {
			t.Fatalf("segment %s: dirty extent at %d (%+v) ready and held", s.spec.Name, off, d)
		}
		_, in := s.dirtyFit[dirtyFit{d.owner, d.n}][off]
		if want := !d.ready && d.owner != noOwner; in != want {
			t.Fatalf("segment %s: dirty extent at %d (%+v) in the owners' index: %v", s.spec.Name, off, d, in)
		}
		if in {
			fit++
		}
	}
	for _, set := range s.dirtyFit {
		fit -= len(set)
	}
	for off := range s.ready {
		if _, ok := s.dirty[off]; !ok {
			t.Fatalf("segment %s: %d ready but not dirty", s.spec.Name, off)
		}
	}
	if held != s.heldBytes {
		t.Fatalf("segment %s: %d held bytes counted, %d in its extents", s.spec.Name, s.heldBytes, held)
	}
	if n != s.dirtyBytes || fit != 0 {
		t.Fatalf("segment %s: %d dirty bytes counted, %d in its extents; %d index entries unaccounted", s.spec.Name, s.dirtyBytes, n, -fit)
	}
}

// checkTenantHeld: each tenant's held bytes are those of the held dirty
// extents it owns.
func checkTenantHeld(t *testing.T, m *Master) {
	t.Helper()
	if m.tenants == nil {
		return
	}
	want := map[string]uint64{}
	for _, s := range m.segOrder {
		for _, d := range s.dirty {
			if d.held && d.owner != "" && d.owner != noOwner {
				want[d.owner] += d.n
			}
		}
	}
	for name, a := range m.tenants.acct {
		if a.held != want[name] {
			t.Fatalf("tenant %q: %d held bytes charged, %d in its extents", name, a.held, want[name])
		}
		delete(want, name)
	}
	for name, n := range want {
		t.Fatalf("tenant %q: %d held bytes in its extents, no account", name, n)
	}
}

func checkInvariants(t *testing.T, m *Master) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	used := map[*segment]uint64{}
	keys := map[*segment]map[string]bool{}
	objects := checkObjectTable(t, m)
	checkTenantHeld(t, m)
	for k, o := range objects {
		if o.nrep == 0 {
			t.Fatalf("object %q without replicas", k)
		}
		seen := map[string]bool{}
		for _, r := range m.reps(o) {
			if int(r.seg) >= len(m.segTab) || m.segTab[r.seg] == nil {
				t.Fatalf("object %q has a replica on unmounted segment ID %d", k, r.seg)
			}
			s := m.segOf(r)
			if seen[s.spec.Name] {
				t.Fatalf("object %q has two replicas under the name %s", k, s.spec.Name)
			}
			seen[s.spec.Name] = true
			if m.segments[s.key] != s || s.id != r.seg {
				t.Fatalf("object %q has a replica on unmounted segment %s", k, s.spec.Name)
			}
			used[s] += s.alloc.Rounded(o.alloc())
			if keys[s] == nil {
				keys[s] = map[string]bool{}
			}
			keys[s][k] = true
		}
		if _, p := m.pending[o.id]; p == o.complete {
			t.Fatalf("object %q complete=%v but pending=%v (ID %d)", k, o.complete, p, o.id)
		}
	}
	for id := range m.pending {
		if o := objects[m.keyOf(m.objects.at(id))]; o == nil || o.id != id {
			t.Fatalf("pending ID %d is not an object", id)
		}
	}
	for _, z := range m.zombies {
		used[z.seg] += z.seg.alloc.Rounded(z.size)
	}
	addTaskSpace(m, used) // copy/move targets being written
	for _, s := range m.segOrder {
		for _, tb := range s.tombs {
			used[s] += tb.n
		}
		for _, f := range s.fenced {
			used[s] += f.n
		}
		checkDirty(t, s)
		used[s] += s.dirtyBytes
		if used[s] != s.alloc.Used() {
			t.Fatalf("segment %s: allocator says %d used, objects+zombies+tombstones (fenced too) %d", s.spec.Name, s.alloc.Used(), used[s])
		}
		if len(s.objects) != len(keys[s]) {
			t.Fatalf("segment %s: %d objects listed, %d replicas", s.spec.Name, len(s.objects), len(keys[s]))
		}
		for i, id := range s.objects {
			o := m.objects.at(id)
			k := m.keyOf(o)
			if objects[k] != o || !keys[s][k] || m.replicaOn(o, s).at != uint32(i) {
				t.Fatalf("segment %s: list entry %d (%q) is not an object with a replica there pointing back", s.spec.Name, i, k)
			}
		}
	}
	if len(m.segOrder) != len(m.segments) {
		t.Fatalf("%d ordered segments, %d mounted", len(m.segOrder), len(m.segments))
	}
	for i, s := range m.segOrder {
		if m.segments[s.key] != s {
			t.Fatalf("segment %s (key %s) not filed under its key", s.spec.Name, s.key)
		}
		if i > 0 && compareSegments(m.segOrder[i-1], s) >= 0 {
			t.Fatalf("segOrder out of order at %d: %s, %s", i, m.segOrder[i-1].key, s.key)
		}
		if c := m.clients[s.client]; c == nil || c.segments[s.spec.Name] != s {
			t.Fatalf("segment %s (key %s) missing from client %s's map", s.spec.Name, s.key, s.client)
		}
	}
	checkCounts(t, m)
	for id, c := range m.clients {
		for name, s := range c.segments {
			if s.client != id || s.spec.Name != name || m.segments[s.key] != s {
				t.Fatalf("client %s files %s, a segment of %s named %s (mounted: %v)", id, name, s.client, s.spec.Name, m.segments[s.key] == s)
			}
		}
	}
}

// checkCounts recomputes by a scan what counts.go and the listing index keep
// current, and compares; caller holds mu.
func checkCounts(t *testing.T, m *Master) {
	t.Helper()
	now := m.clock.Now()
	var want counts
	visible := map[string]bool{}
	objects := allObjects(m)
	for k, o := range objects {
		if !o.complete {
			if strings.HasPrefix(k, SlotPrefix) {
				want.putSlots++
			}
			continue
		}
		visible[k] = true
		want.replicas += int(o.nrep)
		want.replicaBytes += o.size * uint64(o.nrep)
		if o.hardPin {
			want.hardPinned++
		}
	}
	diskObjects := map[*segment]int{}
	for k, d := range m.disk {
		visible[k] = true
		diskObjects[d.seg]++
	}
	if got := m.counts; got.replicas != want.replicas || got.replicaBytes != want.replicaBytes || got.hardPinned != want.hardPinned ||
		got.putSlots != want.putSlots {
		t.Fatalf("counts: replicas %d bytes %d hard %d slots %d; a scan finds %d %d %d %d", got.replicas, got.replicaBytes, got.hardPinned,
			got.putSlots, want.replicas, want.replicaBytes, want.hardPinned, want.putSlots)
	}
	// Leases and soft pins: a deadline counts until up to one granule after
	// it, so the count lies between the scan's at now and at now - granule.
	between := func(what string, d *deadlines, deadline func(o *object) (time.Time, bool)) {
		lo, hi := 0, 0
		for _, o := range objects {
			if t, ok := deadline(o); ok && o.complete {
				if t.After(now) {
					lo++
				}
				if t.After(now.Add(-time.Duration(d.g))) {
					hi++
				}
			}
		}
		if n := d.live(now); n < lo || n > hi {
			t.Fatalf("%s: counted %d, a scan finds %d to %d", what, n, lo, hi)
		}
	}
	between("leased", m.counts.leases, func(o *object) (time.Time, bool) { return o.leaseUntil.time(), true })
	between("soft pinned", m.counts.softPins, func(o *object) (time.Time, bool) { return o.softPinUntil.time(), !o.hardPin })
	if m.index.len() != len(visible) {
		t.Fatalf("listing index holds %d keys, %d are visible", m.index.len(), len(visible))
	}
	prev, n := "", 0
	m.index.ascend("", m.index.len()+3, func(k string) bool {
		if !visible[k] {
			t.Fatalf("listing index holds %q, not visible", k)
		}
		if n > 0 && k <= prev {
			t.Fatalf("listing index out of order: %q after %q", k, prev)
		}
		prev, n = k, n+1
		return true
	})
	if n != len(visible) {
		t.Fatalf("listing index walks %d keys, %d are visible", n, len(visible))
	}
	m.index.acquire()
	defer m.index.release()
	if len(m.index.parts) != len(m.index.bounds)+1 || !slices.IsSorted(m.index.bounds) ||
		len(slices.Compact(slices.Clone(m.index.bounds))) != len(m.index.bounds) {
		t.Fatalf("listing index: %d partitions, bounds %q", len(m.index.parts), m.index.bounds)
	}
	items, empty := 0, 0
	for _, p := range m.index.parts {
		if p.t.Len() == 0 {
			empty++
		}
		items += p.t.Len()
	}
	if items != m.index.n {
		t.Fatalf("listing index counts %d items, its partitions hold %d", m.index.n, items)
	}
	if len(m.index.parts) > 1 && !m.index.pinned && (empty > m.index.emptied || 2*empty >= len(m.index.parts)) {
		t.Fatalf("listing index: %d of %d partitions empty, %d counted", empty, len(m.index.parts), m.index.emptied)
	}
	m.index.ascendItems(func(part int, item uint32) bool {
		id := m.index.recID(item)
		if k := m.objects.keyBytes(m.objects.at(id)); m.index.partOf(k) != part {
			t.Fatalf("listing index item %#x (%q) in partition %d, its key's is %d", item, k, part, m.index.partOf(k))
		}
		if o := m.objects.at(id); objects[m.keyOf(o)] != o || !o.complete {
			t.Fatalf("listing index item %#x holds record %d (%q), not a complete object", item, id, m.keyOf(o))
		}
		if e := m.index.entryOf(id); (item&entryBit != 0) != (e != 0) || (e != 0 && item != e|entryBit) {
			t.Fatalf("record %d names entry %d, listed by item %#x", id, e, item)
		}
		return true
	})
	m.index.disk.Ascend(func(k string) bool {
		if o := objects[k]; m.disk[k] == nil || (o != nil && o.complete) {
			t.Fatalf("disk listing holds %q, not a key held only on disk", k)
		}
		return true
	})
	tombs := 0
	for _, s := range m.segOrder {
		for off, tb := range s.tombs {
			for _, k := range []string{tb.key, tb.alias} {
				if k == "" {
					continue
				}
				tombs++
				e := m.tombIdx[k]
				if e == nil || !slices.Contains(e.at, tombLoc{seg: s, off: off}) || e.seq < tb.seq {
					t.Fatalf("tombstone %s@%d of %q missing from the index", s.spec.Name, off, k)
				}
			}
		}
	}
	for id, p := range m.priors {
		if _, ok := m.pending[id]; !ok || m.priorSlot[p.key] != id || !strings.HasPrefix(m.keyOf(m.objects.at(id)), SlotPrefix) {
			t.Fatalf("reused slot %d (older header of %q) not a pending slot or not indexed", id, p.key)
		}
	}
	if len(m.priorSlot) != len(m.priors) {
		t.Fatalf("%d keys with older headers in slots, %d slots", len(m.priorSlot), len(m.priors))
	}
	indexed := 0
	for _, e := range m.tombIdx {
		indexed += len(e.at)
	}
	if indexed != tombs {
		t.Fatalf("%d tombstones indexed, %d filed", indexed, tombs)
	}
	for _, s := range m.segOrder {
		if s.diskObjects != diskObjects[s] {
			t.Fatalf("segment %s counts %d disk copies, %d filed", s.spec.Name, s.diskObjects, diskObjects[s])
		}
	}
}

// FuzzMasterOps drives the core with arbitrary operation sequences and
// checks its invariants after every step.
func FuzzMasterOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte{0, 0x10, 0, 0x21, 1, 0x10, 3, 0x10, 5, 0, 8, 9, 0, 0x35, 1, 0x35, 11, 1, 7, 0xff, 7, 0xff})
	f.Add([]byte{0, 0x42, 0, 0x43, 0, 0x44, 9, 0, 9, 1, 7, 0x80, 7, 0x80, 10, 2, 0, 0x45})
	f.Add([]byte{1, 0, 0x10, 1, 0x10, 0, 0x21, 1, 0x21, 13, 0, 14, 0, 4, 0x10, 14, 1, 0, 0x31, 11, 0x31, 14, 2, 13, 1})
	// Shared names: c1 mounts s0 (endpoint e4) beside c0's, c2 s1 (e5) beside c1's, c1 a second
	// s1 (refused); puts, a clear and copy/move by name, tasks run, c0's s0 unmounted and
	// e4 mounted again by c0 (replacing c1's), a graceful unmount by c2.
	f.Add([]byte{9, 0x0c, 9, 0x15, 9, 0x0d, 0, 0x82, 1, 0x82, 0, 0x43, 1, 0x43, 7, 0xff, 15, 0x12, 16, 0x0a, 16, 0x0b,
		17, 0x02, 17, 0x0b, 10, 0x04, 9, 0x04, 12, 0x15, 7, 0xff, 14, 0x03})
	// Upserts through reused slots (durable): k0 by c0 three times, k0 removed while c0's slot
	// holds its older header, a heartbeat; k1 by c1 twice, then evicted by a fill.
	f.Add([]byte{1, 20, 0x80, 20, 0x80, 20, 0x80, 4, 0x80, 7, 0x10, 20, 0x80, 20, 0x81, 20, 0x81, 0, 0x7f, 0, 0x7e, 7, 0xff, 20, 0x80})
	// Twelve bytes: scrubbing and tenant t's keys; t's puts, removes (held)
	// and a tick past the holds.
	f.Add([]byte{0, 4, 1, 4, 0, 5, 4, 4, 4, 5, 7, 200})
	f.Fuzz(runOps)
}

// runOps is the body of FuzzMasterOps.
func runOps(t *testing.T, ops []byte) {
	clk := newFakeClock()
	durable := len(ops)%2 == 1 // odd length: durable objects, tombstones, a disk tier on s1 and s3
	scrub := len(ops)&4 != 0   // freed extents dirty until a node reports them zeroed (scrub.go)
	m, err := New(Config{ClientTTL: 5 * time.Second, PutTimeout: 2 * time.Second, PutReleaseTimeout: 4 * time.Second,
		LeaseTTL: time.Second, HighWatermark: 0.8, EvictionRatio: 0.2, Durable: durable, Scrub: scrub}, clk)
	if err != nil {
		t.Fatal(err)
	}
	if durable {
		ops = ops[1:]
	}
	// With scrubbing, half the keys may be tenant t's (a quota of 24 KiB):
	// its freed extents are held and charged (checkTenantHeld).
	tenanted := scrub && len(ops)&8 != 0
	if tenanted {
		m.SetTenantQuotas(quotaMap{"t": {24 << 10, 0}})
	}
	if len(ops)&2 != 0 { // the listing index cut in key ranges that stay (keys equal to bounds, one range always empty)
		m.index.mu.Lock()
		m.index.pinned = true
		m.index.setBounds([]string{"k2", "k4a", "k5", "k5a"})
		m.index.mu.Unlock()
	}
	seg := func(i byte) SegmentSpec {
		// Eight endpoints under four names: two clients may share a name.
		s := SegmentSpec{Name: fmt.Sprintf("s%d", i%4), Endpoint: fmt.Sprintf("e%d", i%8), Base: uint64(i%8+1) << 30, Size: 16 << 10}
		if durable && i%2 == 1 {
			s.DiskURL, s.OffloadOnEvict, s.PromotionOnHit = "http://d", true, true
		}
		return s
	}
	// ack plays client c: it zeroes every tombstone listed (offloads
	// are reported as disk copies) and reports them.
	ack := func(c string) {
		_, _, todo := m.Heartbeat(c, nil)
		var onDisk []HeldObject
		for _, r := range todo {
			if r.Offload {
				onDisk = append(onDisk, HeldObject{Segment: r.Segment, Key: m.tombKeyAt(r.Segment, r.Offset), Seq: r.Seq, Size: 1, Disk: true})
			}
		}
		m.DiskSync(c, onDisk, nil)
		m.Heartbeat(c, todo)
	}
	for _, i := range []byte{0, 1} {
		if err := m.MountSegment(fmt.Sprintf("c%d", i), seg(i)); err != nil {
			t.Fatal(err)
		}
	}
	nextSlot := map[string]string{} // each client's slot from its last CommitNext
	for len(ops) >= 2 {
		op, arg := ops[0], ops[1]
		ops = ops[2:]
		key := fmt.Sprintf("k%d", arg%8)
		if tenanted && arg%8 >= 4 {
			key = tenant.Namespace("t") + key
		}
		client := fmt.Sprintf("c%d", arg%3)
		size := uint64(arg)*37 + 1
		switch op % 22 {
		case 0:
			m.PutStart(client, key, size, ReplicateConfig{Replicas: int(arg%3) + 1, SoftPin: arg&0x40 != 0, HardPin: arg&0x80 != 0})
		case 1:
			m.PutEnd(client, key, uint32(arg))
		case 2:
			m.PutRevoke(client, key)
		case 3:
			m.GetReplicaList(key)
		case 4:
			m.Remove(key, arg&1 == 1)
		case 5:
			m.RemoveAll(arg&1 == 1)
		case 6:
			m.RemoveByRegex(fmt.Sprintf("^k[%d-7]", arg%8), arg&1 == 1)
		case 7:
			clk.Advance(time.Duration(arg) * 20 * time.Millisecond)
			m.Tick()
		case 8:
			m.Ping(client)
		case 9: // client from other bits than the name: clients share names
			m.MountSegment(fmt.Sprintf("c%d", arg/8%4), seg(arg))
		case 10:
			m.UnmountSegment(fmt.Sprintf("c%d", arg%4), seg(arg).Name)
		case 11:
			m.Upsert(client, key, size, ReplicateConfig{Replicas: int(arg%2) + 1})
		case 12:
			m.GracefulUnmount(fmt.Sprintf("c%d", arg/8%4), seg(arg).Name, time.Duration(arg)*10*time.Millisecond)
		case 13:
			m.Evict()
		case 14:
			ack(fmt.Sprintf("c%d", arg%4))
		case 15:
			target := ""
			if arg&0x10 != 0 {
				target = seg(arg >> 5).Name
			}
			m.BatchReplicaClear(client, []string{key, fmt.Sprintf("k%d", (arg+1)%8)}, target)
		case 16:
			if arg&1 == 0 {
				m.CreateCopyTask(key, []string{seg(arg >> 1).Name, seg(arg >> 3).Name})
			} else {
				m.CreateMoveTask(key, seg(arg>>1).Name, seg(arg>>3).Name)
			}
		case 17:
			c := fmt.Sprintf("c%d", arg%4)
			for _, a := range m.FetchTasks(c, int(arg%3)+1) {
				failure := ""
				if arg&0x40 != 0 {
					failure = "fuzz"
				}
				if arg&0x80 == 0 {
					m.FinishTask(c, a.ID, failure)
				}
			}
		case 18: // a put through a slot
			slot, _, err := m.PutReserve(client, size, len(key), ReplicateConfig{Replicas: int(arg%2) + 1})
			if err == nil && arg&0x20 == 0 {
				m.PutCommit(client, key, slot, uint32(arg), ReplicateConfig{SoftPin: arg&0x40 != 0}, arg&0x80 != 0)
			}
		case 19: // a listing in pages of arg%4+1 keys, against the visible keys
			checkListing(t, m, int(arg%4)+1)
		case 20: // a put through the client's slot of 100 bytes, asking for the next (a reused version, upserts)
			slot := nextSlot[client]
			if slot == "" {
				slot, _, _ = m.PutReserve(client, 100, len(key), ReplicateConfig{})
			}
			c := m.CommitNext(client, key, slot, uint32(arg), ReplicateConfig{}, arg&0x80 != 0, SlotAsk{Size: 100, KeyLen: len(key)})
			nextSlot[client] = c.Slot
		case 21: // client c's node zeroes what it is told to and reports it (or, odd arg, reports garbage)
			c := fmt.Sprintf("c%d", arg%4)
			todo := m.Scrub(c, nil)
			if arg&1 == 1 {
				for i := range todo {
					todo[i].Length += uint64(arg)
				}
			}
			m.Scrub(c, todo)
		}
		checkInvariants(t, m)
	}
	m.RemoveAll(true)
	clk.Advance(time.Hour)
	m.Tick()
	for i := range 4 {
		ack(fmt.Sprintf("c%d", i))
		for c := fmt.Sprintf("c%d", i); m.DirtyBytes() > 0; { // every extent named and reported, however many answers it takes
			todo := m.Scrub(c, nil)
			if len(todo) == 0 {
				break
			}
			m.Scrub(c, todo)
		}
	}
	checkInvariants(t, m)
	if d := m.DirtyBytes(); d != 0 {
		t.Fatalf("%d bytes still dirty after every node reported", d)
	}
	if st := m.Stats(); st.Used != 0 {
		t.Fatalf("space leaked after everything expired: %+v", st)
	}
}

// allObjects is every object by key; caller holds mu.
func allObjects(m *Master) map[string]*object {
	out := map[string]*object{}
	m.objects.each(func(o *object) bool {
		out[m.keyOf(o)] = o
		return true
	})
	return out
}

// checkObjectTable verifies the object table (objtab.go) and returns its
// objects by key: every record ID is handed out once (live, or free), the
// hash index holds each live record once and finds it by its key, the
// arena's live bytes are the live keys', the side list holds exactly the
// objects with several replicas, and the owner counts match. Caller holds
// mu.
func checkObjectTable(t *testing.T, m *Master) map[string]*object {
	t.Helper()
	tb := m.objects
	out := map[string]*object{}
	ids := map[uint32]bool{}
	var keyBytes uint64
	owners := map[uint32]int32{}
	for _, s := range tb.slots {
		if s == 0 {
			continue
		}
		id := uint32(s)
		if id == 0 || id >= tb.next || ids[id] {
			t.Fatalf("hash slot names record %d (next %d, seen %v)", id, tb.next, ids[id])
		}
		ids[id] = true
		o := tb.at(id)
		k := tb.key(o)
		if o.id != id || uint32(s>>32) != tb.hash(k) {
			t.Fatalf("record %d (%q) filed as %d with hash %x", o.id, k, id, s>>32)
		}
		if out[k] != nil {
			t.Fatalf("key %q held by records %d and %d", k, out[k].id, id)
		}
		if tb.get(k) != o {
			t.Fatalf("lookup of %q does not find record %d", k, id)
		}
		out[k] = o
		keyBytes += uint64(o.key.len())
		if o.owner != 0 {
			owners[o.owner]++
		}
		if _, more := tb.more[id]; more != (o.nrep > 1) || (more && len(tb.more[id]) != int(o.nrep)) {
			t.Fatalf("record %d (%q): %d replicas, side list %v", id, k, o.nrep, tb.more[id])
		}
	}
	if len(out) != tb.n {
		t.Fatalf("object table counts %d objects, its hash index holds %d", tb.n, len(out))
	}
	for _, id := range tb.free {
		if ids[id] || id == 0 || id >= tb.next {
			t.Fatalf("free record %d is live or out of range", id)
		}
		ids[id] = true
	}
	if len(ids) != int(tb.next)-1 {
		t.Fatalf("%d records handed out, %d live or free", tb.next-1, len(ids))
	}
	if keyBytes != tb.keyLive {
		t.Fatalf("arena counts %d live key bytes, the objects' keys are %d", tb.keyLive, keyBytes)
	}
	if len(tb.more) > tb.n {
		t.Fatalf("side list of %d entries for %d objects", len(tb.more), tb.n)
	}
	for h, n := range owners {
		if tb.ownerRefs[h] != n || tb.ownerIdx[tb.owners[h]] != h {
			t.Fatalf("owner %d (%q): counted %d, named by %d objects", h, tb.owners[h], tb.ownerRefs[h], n)
		}
	}
	if len(tb.ownerIdx) != len(owners) {
		t.Fatalf("%d owners interned, %d named", len(tb.ownerIdx), len(owners))
	}
	return out
}

// checkListing lists every key in pages of page keys and compares with the
// complete objects in memory and the disk copies (List leaves out none of
// them, and lists nothing else, in key order).
func checkListing(t *testing.T, m *Master, page int) {
	t.Helper()
	var got []string
	for after := ""; ; {
		rows, next := m.List("", after, page)
		for _, r := range rows {
			got = append(got, r.Key)
		}
		if next == "" {
			break
		}
		after = next
	}
	m.mu.Lock()
	var want []string
	for k, o := range allObjects(m) {
		if o.complete {
			want = append(want, k)
		}
	}
	m.mu.Unlock()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("listing in pages of %d: %q, complete objects %q", page, got, want)
	}
}

func init() { arenaCompactMin = 0 } // compact the key arena as soon as half of it is dead
