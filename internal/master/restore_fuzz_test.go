package master

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// FuzzRestoreChunks: reports a node could send (any offsets, sizes, keys,
// sequence numbers, cut into chunks of any size, the chunks of a window
// sent in any order at once) never panic the master nor leave it
// inconsistent: no replicas overlap, and the allocator, counts and listing
// index agree with the objects; the same chunks sent one by one end the
// same way.
func FuzzRestoreChunks(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 1, 2, 0, 1, 3, 4, 9, 2, 1, 5, 0, 0, 200, 7, 3, 9})
	f.Add([]byte("\x00\x10\x01\x02\x03\x20\x01\x02\x04\x30\x02\x05\x05\x00\x03\x01\x06\x31\x04\x07\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		chunkSize := 1 + int(data[0]%9)
		rng := rand.New(rand.NewPCG(uint64(data[1]), 0)) // the order the chunks of a window are sent in
		data = data[2:]
		var held []HeldObject
		off := uint64(0)
		for len(data) >= 4 && len(held) < 200 {
			step, key, size, seq := data[0], data[1], data[2], data[3]
			data = data[4:]
			if step&0x80 != 0 { // sometimes back, misaligned, or overlapping the last
				off -= min(off, uint64(step&0x7f))
			} else {
				off += 64 * uint64(step)
			}
			held = append(held, HeldObject{Segment: "a", Offset: off, Key: fmt.Sprint("k", key%16), Size: uint64(size) * 40, CRC: 1, Seq: uint64(seq % 32)})
		}
		var chunks [][]HeldObject
		for j := 0; j < len(held); j += chunkSize {
			chunks = append(chunks, held[j:min(len(held), j+chunkSize)])
		}
		one, _ := newDurable(t)
		want := restoreChunks(t, one, "c", chunks...)
		checkRestored(t, one)

		m, _ := newDurable(t)
		// The listing index cut in key ranges by the chunks' keys (and
		// each chunk's keys above a partition's), inserted in parallel.
		m.index.partMin, m.index.piece, m.index.workers = 2, 1, 3
		id, err := m.RestoreBegin("c", []SegmentSpec{restoreSpec})
		if err != nil {
			t.Fatal(err)
		}
		var got RestoreResult
		for g := 0; g < len(chunks); g += RestoreWindow {
			k := min(RestoreWindow, len(chunks)-g)
			res := make([]RestoreResult, k)
			errs := make(chan error, k)
			for _, i := range rng.Perm(k) {
				go func() {
					var err error
					res[i], err = m.RestoreChunkContext(context.Background(), "c", id, uint32(g+i), chunks[g+i])
					errs <- err
				}()
			}
			for range k {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range res {
				got.add(r)
			}
		}
		end, err := m.RestoreEnd("c", id)
		if err != nil {
			t.Fatal(err)
		}
		got.add(end)
		checkRestored(t, m)
		if got.Restored != want.Restored || got.Dropped != want.Dropped || !slices.Equal(tombOffsets(got.Tombstones), tombOffsets(want.Tombstones)) {
			t.Fatalf("in flight at once: %d restored, %d dropped, tombstones %v; one by one %d, %d, %v",
				got.Restored, got.Dropped, tombOffsets(got.Tombstones), want.Restored, want.Dropped, tombOffsets(want.Tombstones))
		}
		if a, b := m.Stats(), one.Stats(); a.Objects != b.Objects || a.Used != b.Used {
			t.Fatalf("in flight at once %+v, one by one %+v", a, b)
		}
	})
}
