package disktier

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/transfer"
)

// slicesOf cuts [addr, addr+n) into slices of size bytes, as the engine
// cuts a READ.
func slicesOf(addr uint64, n, size int) []transfer.Range {
	var out []transfer.Range
	for off := 0; off < n; off += size {
		out = append(out, transfer.Range{Addr: addr + uint64(off), Len: uint64(min(size, n-off))})
	}
	return out
}

// TestPrefetch: slices announced by Prefetch (values in any order) are all
// served from reads ahead, with the right bytes; slices of one value that
// follow each other are read together, up to ReadSize per read, except the
// first slice of an idle disk, read alone; ranges outside the values are
// ignored.
func TestPrefetch(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const slice = 256 << 10
	sizes := []int{1<<20 + 100, 300 << 10, 1<<20 + 100}
	vals, addrs := storeAll(t, d, sizes)
	order := []int{0, 2, 1}
	var plan []transfer.Range
	for _, i := range order {
		plan = append(plan, slicesOf(addrs[i], sizes[i], slice)...)
	}
	// Ranges that are not inside one value: skipped.
	d.Prefetch([]transfer.Range{{Addr: addrs[1] + 300<<10, Len: 1}, {Addr: addrs[0] - 4096, Len: 4097}, {Addr: ^uint64(0) - 1, Len: 10}, {Addr: addrs[0], Len: 0}})
	if st := d.IOStats(); st.AheadReads != 0 {
		t.Fatalf("%d reads for ranges outside every value", st.AheadReads)
	}
	d.Prefetch(plan)
	for _, i := range order {
		for _, r := range slicesOf(addrs[i], sizes[i], slice) {
			b, release, err := d.ReadAt(r.Addr, r.Len)
			off := r.Addr - addrs[i]
			if err != nil || !bytes.Equal(b, vals[i][off:off+r.Len]) {
				t.Fatalf("value %d slice at %d: %v", i, off, err)
			}
			release()
		}
	}
	st := d.IOStats()
	if st.AheadHits != uint64(len(plan)) || st.ReadCalls != uint64(len(plan)) {
		t.Fatalf("%d of %d slices served ahead, want all", st.AheadHits, st.ReadCalls)
	}
	// Value 0: its first slice alone (idle disk), then the other four (768
	// KiB and 100 bytes) in one read; value 2: four slices (1 MiB), then the
	// last; value 1: two slices in one read.
	if st.AheadReads != 5 {
		t.Fatalf("%d reads ahead for %d slices, want 5", st.AheadReads, len(plan))
	}
	d.raMu.Lock()
	held, chunks := d.raBytes, len(d.ra)
	d.raMu.Unlock()
	if held != 0 || chunks != 0 {
		t.Fatalf("%d bytes in %d slices still held ahead after every slice was read", held, chunks)
	}
}

// TestPrefetchUnclaimed: slices announced and never asked for are dropped
// once stale, their buffers given back; an announced slice of a value
// deleted or replaced meanwhile is not served (ErrNoObject), and the new
// version's bytes are.
func TestPrefetchUnclaimed(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	vals, addrs := storeAll(t, d, []int{200 << 10, 100 << 10})
	d.Prefetch(slicesOf(addrs[0], len(vals[0]), 64<<10))
	d.Prefetch(slicesOf(addrs[1], len(vals[1]), 64<<10))
	d.Delete("k0", 1)
	if _, _, err := d.ReadAt(addrs[0], 64<<10); !errors.Is(err, ErrNoObject) {
		t.Fatalf("announced slice of a deleted value: %v", err)
	}
	newer := object("k1", 9, 100<<10)
	ob, err := d.Store(newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.ReadAt(addrs[1], 64<<10); !errors.Is(err, ErrNoObject) {
		t.Fatalf("announced slice of a replaced value: %v", err)
	}
	got, err := readAll(d, ob.Addr, int(ob.Size), 64<<10)
	if err != nil || !bytes.Equal(got, newer[len(newer)-100<<10:]) {
		t.Fatalf("the newer version: %v", err)
	}
	// Wait for the reads ahead to end, then sweep as if raStale had passed.
	d.raWG.Wait()
	d.readAhead([]raKey{{addrs[0], 1}}, false, time.Now().Add(2*raStale))
	d.raMu.Lock()
	held, chunks := d.raBytes, len(d.ra)
	d.raMu.Unlock()
	if held != 0 || chunks != 0 {
		t.Fatalf("%d bytes in %d stale slices still held", held, chunks)
	}
}

// TestPrefetchConcurrent: lanes announcing and reading the slices of
// values at once (each value by one lane, slices interleaved across
// lanes as the engine spreads them), while other values are stored and
// deleted, always get the stored bytes or ErrNoObject.
func TestPrefetchConcurrent(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sizes := make([]int, 12)
	for i := range sizes {
		sizes[i] = 200<<10 + i*4096 + 3
	}
	vals, addrs := storeAll(t, d, sizes)
	const lanes = 4
	var wg sync.WaitGroup
	errs := make(chan error, lanes+1)
	for l := range lanes {
		wg.Go(func() {
			for round := range 5 {
				for i := l; i < len(vals); i += lanes {
					rs := slicesOf(addrs[i], len(vals[i]), 64<<10)
					d.Prefetch(rs)
					for _, r := range rs {
						b, release, err := d.ReadAt(r.Addr, r.Len)
						if err != nil {
							errs <- fmt.Errorf("round %d value %d: %w", round, i, err)
							return
						}
						off := r.Addr - addrs[i]
						ok := bytes.Equal(b, vals[i][off:off+r.Len])
						release()
						if !ok {
							errs <- fmt.Errorf("round %d value %d at %d: wrong bytes", round, i, off)
							return
						}
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 20 {
			o := object(fmt.Sprint("other", i), uint64(i+1), 50<<10)
			ob, err := d.Store(o)
			if err != nil {
				errs <- err
				return
			}
			d.Prefetch(slicesOf(ob.Addr, int(ob.Size), 64<<10))
			d.Delete(ob.Key, ob.Seq)
			if _, _, err := d.ReadAt(ob.Addr, 10); !errors.Is(err, ErrNoObject) {
				errs <- fmt.Errorf("deleted value read: %v", err)
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestPrefetchStream: gets of whole values in address order (each one's
// slices announced, then read) read the values after them ahead once the
// one before was read recently; those slices serve the later gets, whose
// announcements start no read of their own.
func TestPrefetchStream(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const slice = 64 << 10
	sizes := []int{200 << 10, 200 << 10, 200 << 10, 200 << 10, 200 << 10, 200 << 10}
	vals, addrs := storeAll(t, d, sizes)
	for i := range vals {
		rs := slicesOf(addrs[i], sizes[i], slice)
		d.Prefetch(rs)
		for _, r := range rs {
			b, release, err := d.ReadAt(r.Addr, r.Len)
			off := r.Addr - addrs[i]
			if err != nil || !bytes.Equal(b, vals[i][off:off+r.Len]) {
				t.Fatalf("value %d slice at %d: %v", i, off, err)
			}
			release()
		}
	}
	st := d.IOStats()
	if st.AheadSpeculative == 0 || st.AheadHits != st.ReadCalls {
		t.Fatalf("%d slices speculated, %d of %d served ahead", st.AheadSpeculative, st.AheadHits, st.ReadCalls)
	}
	// Values 0 and 1 are read as announced (value 0 has no neighbour read
	// before it); from value 1 on the next values come ahead of their gets:
	// fewer reads than one per value and per announcement.
	if st.AheadReads >= uint64(2*len(vals)) {
		t.Fatalf("%d reads ahead for %d gets of 4 slices", st.AheadReads, len(vals))
	}
}

// TestPrefetchShared: two readers announcing the same value's slices (two
// clients getting one hot value) share the reads: both are served ahead,
// the right bytes, from one read per slice run, and nothing stays held.
func TestPrefetchShared(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	vals, addrs := storeAll(t, d, []int{300 << 10})
	rs := slicesOf(addrs[0], len(vals[0]), 64<<10)
	d.Prefetch(rs)
	d.Prefetch(rs)
	for range 2 {
		for _, r := range rs {
			b, release, err := d.ReadAt(r.Addr, r.Len)
			off := r.Addr - addrs[0]
			if err != nil || !bytes.Equal(b, vals[0][off:off+r.Len]) {
				t.Fatalf("slice at %d: %v", off, err)
			}
			release()
		}
	}
	st := d.IOStats()
	if st.AheadHits != st.ReadCalls || st.ReadCalls != uint64(2*len(rs)) || st.AheadReads > 2 {
		t.Fatalf("%d of %d slices served ahead by %d reads, want all by at most 2", st.AheadHits, st.ReadCalls, st.AheadReads)
	}
	d.raMu.Lock()
	held, chunks := d.raBytes, len(d.ra)
	d.raMu.Unlock()
	if held != 0 || chunks != 0 {
		t.Fatalf("%d bytes in %d slices still held", held, chunks)
	}
}
