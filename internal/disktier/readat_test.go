package disktier

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// storeAll stores objects of the given sizes in one batch and returns
// their values and disk objects.
func storeAll(t testing.TB, d *Tier, sizes []int) ([][]byte, []uint64) {
	t.Helper()
	var objs [][]byte
	for i, n := range sizes {
		objs = append(objs, object(fmt.Sprint("k", i), uint64(i+1), n))
	}
	obs, errs := d.StoreBatch(objs)
	vals := make([][]byte, len(objs))
	addrs := make([]uint64, len(objs))
	for i := range objs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		vals[i] = objs[i][len(objs[i])-sizes[i]:]
		addrs[i] = obs[i].Addr
	}
	return vals, addrs
}

// readAll reads [addr, addr+n) in slices of slice bytes, as a lane does.
func readAll(d *Tier, addr uint64, n, slice int) ([]byte, error) {
	var out []byte
	for off := 0; off < n; off += slice {
		b, release, err := d.ReadAt(addr+uint64(off), uint64(min(slice, n-off)))
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
		release()
	}
	return out, nil
}

// TestReadAt: values read by address, in slices of any size and from any
// offset, equal what was stored, with direct and buffered I/O; addresses
// follow the batch's order; reads outside one value fail with ErrNoObject;
// a reopened tier gives its values new addresses (the old ones name
// nothing) and serves them there; a deleted value is gone.
func TestReadAt(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(fmt.Sprint("buffered=", buffered), func(t *testing.T) {
			dir := t.TempDir()
			d, err := Open(Config{Dir: dir, Buffered: buffered})
			if err != nil {
				t.Fatal(err)
			}
			sizes := []int{1, 4095, 4096, 100_000, 300 << 10, 1 << 20}
			vals, addrs := storeAll(t, d, sizes)
			if !buffered && !d.IOStats().Direct {
				t.Logf("the file system refuses O_DIRECT: buffered I/O")
			}
			for i := 1; i < len(addrs); i++ {
				if addrs[i] <= addrs[i-1] || addrs[i]%blockSize != 0 {
					t.Fatalf("addresses %#x then %#x: want increasing, block-aligned, in the batch's order", addrs[i-1], addrs[i])
				}
			}
			for _, slice := range []int{4096, 64 << 10, 256 << 10, 1 << 20} {
				for i, v := range vals {
					got, err := readAll(d, addrs[i], len(v), slice)
					if err != nil || !bytes.Equal(got, v) {
						t.Fatalf("value %d (%d bytes) in %d-byte slices: %v", i, len(v), slice, err)
					}
				}
			}
			// An unaligned piece from the middle.
			b, release, err := d.ReadAt(addrs[4]+777, 5000)
			if err != nil || !bytes.Equal(b, vals[4][777:5777]) {
				t.Fatalf("piece: %v", err)
			}
			release()
			for _, bad := range [][2]uint64{
				{addrs[0], 2},                        // past the end of a 1-byte value
				{addrs[0] + 1, 1},                    // in the gap after it
				{addrs[5] - 1, 2},                    // across the gap into a value
				{addrs[5], 1<<20 + 1},                // one byte too long
				{addrs[5], 0},                        // empty
				{regionBase - 4096, 100},             // before the region
				{^uint64(0) - 10, 100},               // overflow
				{addrs[3] + 50_000, ^uint64(0) - 10}, // overflow from inside a value
			} {
				if _, _, err := d.ReadAt(bad[0], bad[1]); !errors.Is(err, ErrNoObject) {
					t.Fatalf("ReadAt(%#x, %d): %v, want ErrNoObject", bad[0], bad[1], err)
				}
			}
			d.Delete("k2", 3)
			if _, _, err := d.ReadAt(addrs[2], 10); !errors.Is(err, ErrNoObject) {
				t.Fatalf("read of a deleted value: %v", err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			stray := filepath.Join(dir, "0123-1.obj.7.tmp") // a write cut short by a crash
			if err := os.WriteFile(stray, []byte("partial"), 0o644); err != nil {
				t.Fatal(err)
			}
			d, err = Open(Config{Dir: dir, Buffered: buffered})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if _, err := os.Stat(stray); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a stray temporary file survived Open: %v", err)
			}
			if _, _, err := d.ReadAt(addrs[5], 100); !errors.Is(err, ErrNoObject) {
				t.Fatalf("address from before the reopen: %v, want ErrNoObject", err)
			}
			held := d.Held()
			if len(held) != len(sizes)-1 {
				t.Fatalf("reopened: %d values, want %d", len(held), len(sizes)-1)
			}
			for _, h := range held {
				var i int
				fmt.Sscanf(h.Key, "k%d", &i)
				got, err := readAll(d, h.Addr, int(h.Size), 256<<10)
				if err != nil || !bytes.Equal(got, vals[i]) {
					t.Fatalf("%s after reopen at %#x: %v", h.Key, h.Addr, err)
				}
			}
		})
	}
}

// TestReadAhead: reading values one after the other, in slices, is served
// by reads started ahead; the bytes are right; slices read ahead and never
// asked for are dropped once stale, their buffers kept within bounds.
func TestReadAhead(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sizes := make([]int, 16)
	for i := range sizes {
		sizes[i] = 256<<10 + i*4096 + 7
	}
	vals, addrs := storeAll(t, d, sizes)
	for i, v := range vals {
		got, err := readAll(d, addrs[i], len(v), 64<<10)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("value %d: %v", i, err)
		}
	}
	st := d.IOStats()
	if st.AheadHits < st.ReadCalls/2 {
		t.Fatalf("%d of %d slices served by read-ahead, want most", st.AheadHits, st.ReadCalls)
	}
	// A value rewritten with a newer version gets a new address: the
	// slices read ahead at the old one are never served for it.
	if _, err := d.Store(object("k0", 99, 1000)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.ReadAt(addrs[0], 10); !errors.Is(err, ErrNoObject) {
		t.Fatalf("old version's address: %v", err)
	}
	d.raMu.Lock()
	held := d.raBytes
	d.raMu.Unlock()
	if held > raMax {
		t.Fatalf("%d bytes held ahead, bound %d", held, raMax)
	}
}

// TestStoreBatch: a batch of objects lands as files of the
// tier's layout (header block, then the value), each a new file per
// version; a bad object in the batch fails alone.
func TestStoreBatch(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	objs := [][]byte{object("a", 1, 5000), object("b", 2, 1<<20), []byte("not an object"), object("c", 3, 1)}
	bad := object("d", 4, 100)
	bad[len(bad)-1] ^= 1
	objs = append(objs, bad)
	obs, errs := d.StoreBatch(objs)
	for i, want := range []bool{true, true, false, true, false} {
		if (errs[i] == nil) != want {
			t.Fatalf("object %d: %v", i, errs[i])
		}
	}
	if obs[1].Key != "b" || obs[1].Size != 1<<20 || obs[1].Addr == 0 {
		t.Fatalf("stored b: %+v", obs[1])
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.obj"))
	if len(files) != 3 {
		t.Fatalf("%d files, want 3", len(files))
	}
	for _, f := range files {
		st, _ := os.Stat(f)
		if st.Size() < blockSize {
			t.Fatalf("%s: %d bytes, want the header block and the value", f, st.Size())
		}
	}
	if st := d.IOStats(); st.WriteBytes != uint64(3*blockSize+5000+1<<20+1) || st.WriteWall <= 0 {
		t.Fatalf("io stats %+v", st)
	}
}

// FuzzReadAt: any address and length a peer sends either read exactly the
// stored bytes or fail with ErrNoObject; nothing else happens.
func FuzzReadAt(f *testing.F) {
	d, err := Open(Config{Dir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	vals, addrs := storeAll(f, d, []int{100, 8192, 70_000})
	for i, a := range addrs {
		f.Add(a-regionBase, uint64(len(vals[i])))
		f.Add(a-regionBase+1, uint64(len(vals[i])))
		f.Add(a-regionBase, uint64(0))
	}
	f.Add(uint64(0), uint64(1))
	f.Add(^uint64(0), ^uint64(0))
	f.Fuzz(func(t *testing.T, off, n uint64) {
		if n > 1<<20 {
			n %= 1 << 20
		}
		addr := regionBase + off
		b, release, err := d.ReadAt(addr, n)
		if err != nil {
			if !errors.Is(err, ErrNoObject) {
				t.Fatalf("ReadAt(%#x, %d): %v", addr, n, err)
			}
			return
		}
		defer release()
		for i, a := range addrs {
			if addr >= a && addr+n <= a+uint64(len(vals[i])) {
				if !bytes.Equal(b, vals[i][addr-a:addr-a+n]) {
					t.Fatalf("ReadAt(%#x, %d): wrong bytes", addr, n)
				}
				return
			}
		}
		t.Fatalf("ReadAt(%#x, %d) read outside every value", addr, n)
	})
}

// TestReadDescriptorsBounded: reads keep at most fdCacheMax descriptors
// open, a deleted file's is closed, and the values still read right.
func TestReadDescriptorsBounded(t *testing.T) {
	d, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sizes := make([]int, fdCacheMax+40)
	for i := range sizes {
		sizes[i] = 100 + i
	}
	vals, addrs := storeAll(t, d, sizes)
	for round := range 2 {
		for i, v := range vals {
			got, err := readAll(d, addrs[i], len(v), 4096)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("round %d value %d: %v", round, i, err)
			}
		}
	}
	d.fds.mu.Lock()
	open := len(d.fds.m)
	d.fds.mu.Unlock()
	if open == 0 || open > fdCacheMax {
		t.Fatalf("%d descriptors cached, want 1..%d", open, fdCacheMax)
	}
	last := len(vals) - 1
	d.Delete(fmt.Sprint("k", last), uint64(last+1))
	d.fds.mu.Lock()
	_, still := d.fds.m[d.file(fmt.Sprint("k", last), uint64(last+1))]
	d.fds.mu.Unlock()
	if still {
		t.Fatal("a deleted file's descriptor is still cached")
	}
}
