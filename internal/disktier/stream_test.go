package disktier

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/kvcache-go/mooncake/transfer"
)

// TestStoreBatchPutOrder: a batch handed over in any order (the master's
// eviction order) gets its addresses in the order the values were put
// (their sequence numbers), so values read back in the order they were
// written are in address order.
func TestStoreBatchPutOrder(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seqs := []uint64{7, 3, 9, 1, 5}
	var objs [][]byte
	for _, s := range seqs {
		objs = append(objs, object(fmt.Sprint("k", s), s, 5000))
	}
	obs, errs := d.StoreBatch(objs)
	bySeq := map[uint64]uint64{}
	for i := range objs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		bySeq[obs[i].Seq] = obs[i].Addr
	}
	prev := uint64(0)
	for _, s := range []uint64{1, 3, 5, 7, 9} {
		if a := bySeq[s]; a <= prev {
			t.Fatalf("value of seq %d at %#x, not after the one put before it (%#x)", s, a, prev)
		}
		prev = bySeq[s]
	}
}

// TestPrefetchStreamParts: gets of whole values in address order whose
// slices are announced one at a time and out of order (a get's parts in
// flight together, arriving in any order) still read the values after
// them ahead, ReadDepth reads of ReadSize past the value: from the third
// get on, no announcement starts a read of its own and every slice is
// served ahead.
func TestPrefetchStreamParts(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const slice = 64 << 10
	const size = 256 << 10
	sizes := make([]int, 12)
	for i := range sizes {
		sizes[i] = size
	}
	vals, addrs := storeAll(t, d, sizes)
	perm := []int{2, 0, 3, 1} // the order the parts arrive in
	var readsAt2 uint64
	for i := range vals {
		if i == 2 {
			readsAt2 = d.IOStats().AheadReads
		}
		rs := slicesOf(addrs[i], sizes[i], slice)
		for _, p := range perm {
			d.Prefetch([]transfer.Range{rs[p]})
		}
		for _, p := range perm {
			r := rs[p]
			b, release, err := d.ReadAt(r.Addr, r.Len)
			off := r.Addr - addrs[i]
			if err != nil || !bytes.Equal(b, vals[i][off:off+r.Len]) {
				t.Fatalf("value %d slice at %d: %v", i, off, err)
			}
			release()
		}
	}
	st := d.IOStats()
	if st.AheadHits != st.ReadCalls {
		t.Fatalf("%d of %d slices served ahead", st.AheadHits, st.ReadCalls)
	}
	// From value 2 on every value was read ahead whole, in one read
	// (values 2..11: at most one read each, plus none of their own).
	if got := st.AheadReads - readsAt2; got > uint64(len(vals)-2) {
		t.Fatalf("%d reads for the last %d values, want at most one each", got, len(vals)-2)
	}
	d.raMu.Lock()
	held := d.raBytes
	d.raMu.Unlock()
	if held > raSpec {
		t.Fatalf("%d bytes held ahead after the stream, want at most %d", held, raSpec)
	}
}

// TestPrefetchStreamBatch: batches of values in address order (a batch
// get's READs, announced together) read the values after the batch
// ahead, so the next batch is served from reads started before it was
// announced; a batch of scattered values reads nothing it was not asked
// for.
func TestPrefetchStreamBatch(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const slice = 64 << 10
	const size = 128 << 10
	sizes := make([]int, 24)
	for i := range sizes {
		sizes[i] = size
	}
	vals, addrs := storeAll(t, d, sizes)
	get := func(idx []int) {
		t.Helper()
		var plan []transfer.Range
		for _, i := range idx {
			plan = append(plan, slicesOf(addrs[i], sizes[i], slice)...)
		}
		d.Prefetch(plan)
		for _, i := range idx {
			for _, r := range slicesOf(addrs[i], sizes[i], slice) {
				b, release, err := d.ReadAt(r.Addr, r.Len)
				off := r.Addr - addrs[i]
				if err != nil || !bytes.Equal(b, vals[i][off:off+r.Len]) {
					t.Fatalf("value %d slice at %d: %v", i, off, err)
				}
				release()
			}
		}
	}
	// Scattered: nothing read beyond what was announced.
	get([]int{20, 9, 15})
	if st := d.IOStats(); st.AheadSpeculative != 0 {
		t.Fatalf("%d slices speculated for a scattered batch", st.AheadSpeculative)
	}
	// In address order, four at a time: the values after the batch are
	// read ahead before anyone announced them, and serve the next batch.
	get([]int{0, 1, 2, 3})
	if d.IOStats().AheadSpeculative == 0 {
		t.Fatal("nothing read ahead past a batch in address order")
	}
	d.raMu.Lock()
	for _, i := range []int{4, 5, 6, 7} {
		for _, r := range slicesOf(addrs[i], sizes[i], slice) {
			if c := d.ra[raKey{r.Addr, r.Len}]; c == nil || c.claims != 0 {
				t.Errorf("value %d slice at %#x not read ahead unannounced: %+v", i, r.Addr, c)
			}
		}
	}
	d.raMu.Unlock()
	get([]int{4, 5, 6, 7})
	if st := d.IOStats(); st.AheadHits != st.ReadCalls {
		t.Fatalf("%d of %d slices served ahead", st.AheadHits, st.ReadCalls)
	}
}

// TestPrefetchAnnouncedFirst: reads a lane announced run before the reads
// of other readers' streams: a stream's speculative reads queue behind
// every announced read, and one a lane then announces moves up to the
// announced ones, so one reader's stream never delays another's get.
func TestPrefetchAnnouncedFirst(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const slice = 64 << 10
	const size = 128 << 10
	sizes := make([]int, 12)
	for i := range sizes {
		sizes[i] = size
	}
	vals, addrs := storeAll(t, d, sizes)
	// Hold the readers back (as if all were busy) to look at the queue.
	d.raMu.Lock()
	d.raReaders = ReadDepth
	d.raMu.Unlock()
	d.Prefetch(slicesOf(addrs[0], size, slice))
	d.Prefetch(slicesOf(addrs[1], size, slice)) // value 0 just read: a stream, values 2.. read ahead
	d.Prefetch(slicesOf(addrs[9], size, slice)) // another reader announces value 9
	d.Prefetch(slicesOf(addrs[10], size, slice)[:1])
	d.raMu.Lock()
	var order []int
	specs := 0
	for i, r := range d.raQueue {
		for v := range addrs {
			if r.e.addr == addrs[v] {
				order = append(order, v)
			}
		}
		if r.spec {
			specs++
			if i < d.raFront {
				t.Errorf("speculative read %d of value %d among the announced ones", i, order[i])
			}
		} else if i >= d.raFront {
			t.Errorf("announced read %d of value %d behind the speculative ones", i, order[i])
		}
	}
	front, queued := d.raFront, len(d.raQueue)
	d.raMu.Unlock()
	// Value 10's first slice: the first read of its announcement, at the
	// head; then values 0, 1 and 9 (announced, 9 moved up from the
	// stream's reads); then the stream's reads.
	if len(order) < 5 || order[0] != 10 || specs == 0 || front != queued-specs {
		t.Fatalf("queue %v, %d announced, %d speculative", order, front, specs)
	}
	for _, v := range order[1:front] {
		if v != 0 && v != 1 && v != 9 && v != 10 {
			t.Fatalf("queue %v: value %d among the announced reads", order, v)
		}
	}
	// Let the readers go; every announced slice is served ahead.
	d.raMu.Lock()
	d.raReaders = ReadDepth
	for range ReadDepth {
		d.raWG.Go(d.reader)
	}
	d.raMu.Unlock()
	for _, v := range []int{10, 0, 1, 9} {
		rs := slicesOf(addrs[v], size, slice)
		if v == 10 {
			rs = rs[:1]
		}
		for _, r := range rs {
			b, release, err := d.ReadAt(r.Addr, r.Len)
			off := r.Addr - addrs[v]
			if err != nil || !bytes.Equal(b, vals[v][off:off+r.Len]) {
				t.Fatalf("value %d slice at %d: %v", v, off, err)
			}
			release()
		}
	}
	if st := d.IOStats(); st.AheadHits != st.ReadCalls {
		t.Fatalf("%d of %d slices served ahead", st.AheadHits, st.ReadCalls)
	}
}
