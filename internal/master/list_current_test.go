package master

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestListCurrentAfterHandOver: after many upserts through put slots (each
// committing a new version whose size and CRC differ from the replaced
// one's, some reusing the replaced version as the next slot), removals and
// puts again, a paged listing holds exactly the keys that exist, each with
// the size of its newest version, and a read of every listed key finds
// that version: an upsert's hand-over of its key's place in the listing
// index leaves no entry naming a replaced (freed, or reused as a slot)
// record. Run with and without a restore whose inserts are queued for the
// index's goroutine while the same keys are upserted, removed and put
// again.
func TestListCurrentAfterHandOver(t *testing.T) {
	for _, restoring := range []bool{false, true} {
		t.Run(fmt.Sprintf("restoring=%v", restoring), func(t *testing.T) {
			m, _ := newDurable(t)
			if err := m.MountSegment("w", SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 4 << 30, Size: 64 << 20}); err != nil {
				t.Fatal(err)
			}
			rc := ReplicateConfig{PreferredSegments: []string{"b"}}
			type version struct {
				size uint64
				crc  uint32
			}
			model := map[string]version{}
			var keys []string
			for i := range 48 {
				keys = append(keys, fmt.Sprintf("k%03d", i))
			}
			rng := rand.New(rand.NewPCG(1, 2))
			crc := uint32(1)
			slot, slotSize := "", uint64(0)
			handed := 0 // commits that replaced a listed version
			op := func(k string) {
				crc++
				switch r := rng.IntN(10); {
				case r < 7: // an upsert through a put slot
					size := []uint64{64, 128}[rng.IntN(2)]
					if slot == "" || slotSize != size {
						s, _, err := m.PutReserve("w", size, len(k), rc)
						if err != nil {
							t.Fatal(err)
						}
						slot, slotSize = s, size
					}
					_, existed := model[k]
					c := m.CommitNext("w", k, slot, crc, rc, true, SlotAsk{Size: size, KeyLen: len(k)})
					if c.Gone { // the slot is older than a version of k put since: k keeps its version
						slot = ""
						return
					}
					if c.Err != nil {
						t.Fatalf("commit of %q: %+v", k, c)
					}
					model[k] = version{size, crc}
					slot = c.Slot
					if existed {
						handed++
					}
				case r < 9:
					err := m.Remove(k, false)
					if _, ok := model[k]; ok != (err == nil) {
						t.Fatalf("removal of %q (exists %v): %v", k, ok, err)
					}
					delete(model, k)
				default: // put again the usual way
					if _, err := m.PutStart("w", k, 96, rc); err != nil {
						if _, ok := model[k]; !ok || !errors.Is(err, ErrObjectExists) {
							t.Fatalf("put of %q: %v", k, err)
						}
						return
					}
					if err := m.PutEnd("w", k, crc); err != nil {
						t.Fatal(err)
					}
					model[k] = version{96, crc}
				}
			}
			check := func() {
				t.Helper()
				n, prev := 0, ""
				for after := ""; ; {
					rows, next := m.List("", after, 7)
					for _, r := range rows {
						if n > 0 && r.Key <= prev {
							t.Fatalf("listing out of order: %q after %q", r.Key, prev)
						}
						prev, n = r.Key, n+1
						v, ok := model[r.Key]
						if !ok {
							t.Fatalf("%q listed, does not exist", r.Key)
						}
						if r.Size != v.size || r.Replicas != 1 {
							t.Fatalf("%q listed with size %d and %d replicas, its version has size %d", r.Key, r.Size, r.Replicas, v.size)
						}
						info, err := m.Query(r.Key)
						if err != nil || !info.Complete || info.Size != v.size || info.CRC != v.crc {
							t.Fatalf("listed %q reads %+v, %v; want size %d CRC %d", r.Key, info, err, v.size, v.crc)
						}
					}
					if next == "" {
						break
					}
					after = next
				}
				if n != len(model) {
					t.Fatalf("%d keys listed, %d exist", n, len(model))
				}
			}
			if !restoring {
				for i := range 3000 {
					op(keys[rng.IntN(len(keys))])
					if i%50 == 49 {
						check()
					}
				}
				check()
			} else {
				id, err := m.RestoreBegin("c", []SegmentSpec{restoreSpec})
				if err != nil {
					t.Fatal(err)
				}
				const chunk = 40
				for c := range 5 {
					var held []HeldObject
					for i := c * chunk; i < (c+1)*chunk; i++ {
						k := fmt.Sprintf("r%03d", i)
						held = append(held, rep(uint64(i)*4096, k, 1))
					}
					if _, err := m.RestoreChunk("c", id, uint32(c), held); err != nil {
						t.Fatal(err)
					}
					if c > 0 { // the previous chunk's last report is decided with this chunk
						k := fmt.Sprintf("r%03d", c*chunk-1)
						model[k], keys = version{1000, 1}, append(keys, k)
					}
					for _, h := range held[:len(held)-1] { // the last report waits for what follows it
						model[h.Key], keys = version{h.Size, h.CRC}, append(keys, h.Key)
					}
					// The chunk's inserts are queued for the index's
					// goroutine: upsert, remove and put again its keys.
					for range 200 {
						op(held[rng.IntN(len(held)-1)].Key)
					}
					check()
					for range 200 {
						op(keys[rng.IntN(len(keys))])
					}
					check()
				}
				if _, err := m.RestoreEnd("c", id); err != nil {
					t.Fatal(err)
				}
				model[fmt.Sprintf("r%03d", 5*chunk-1)] = version{1000, 1} // the last chunk's last report
				check()
				checkRestored(t, m)
			}
			if handed < 500 {
				t.Fatalf("%d commits replaced a listed version", handed)
			}
		})
	}
}
