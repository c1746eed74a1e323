package master

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestRestorePipelinedRacesRemoval: a node's chunk calls in flight at once
// (arriving in any order within the window, each hashing its keys and
// stocking the object table's chunks before its turn, past the first full
// record chunk), while another client removes restored keys and puts new
// ones: no removed key comes back, every other report is restored, and
// the tables agree (run with -race).
func TestRestorePipelinedRacesRemoval(t *testing.T) {
	const n = recChunk + 8192
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: uint64(n+1) * 128}
	other := SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 4 << 30, Size: 64 << 20}
	m, _ := newDurable(t)
	if err := m.MountSegment("w", other); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	held := make([]HeldObject, n)
	for i, p := range rng.Perm(n) {
		held[i] = HeldObject{Segment: "a", Offset: uint64(i) * 128, Key: fmt.Sprintf("key/%06d", p), Size: 64, CRC: uint32(p), Seq: 1}
	}
	id, err := m.RestoreBegin("c", []SegmentSpec{spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RestoreExpect("c", id, n); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		removed = map[string]bool{}
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	wg.Go(func() { // removals of keys as they are restored
		r := rand.New(rand.NewPCG(7, 8))
		for {
			select {
			case <-stop:
				return
			default:
			}
			k := held[r.IntN(n)].Key
			if m.Remove(k, true) == nil {
				mu.Lock()
				removed[k] = true
				mu.Unlock()
			}
		}
	})
	wg.Go(func() { // new keys on the other segment
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("new/%06d", i)
			if _, err := m.PutStart("w", k, 64, ReplicateConfig{PreferredSegments: []string{"b"}}); err == nil {
				_ = m.PutEnd("w", k, 1)
			}
		}
	})

	const chunk = 4096
	chunks := (n + chunk - 1) / chunk
	for g := 0; g < chunks; g += RestoreWindow {
		order := rng.Perm(min(RestoreWindow, chunks-g)) // the calls of a window arrive in any order
		errs := make(chan error, len(order))
		for _, i := range order {
			c := g + i
			go func() {
				_, err := m.RestoreChunkContext(t.Context(), "c", id, uint32(c), held[c*chunk:min(n, (c+1)*chunk)])
				errs <- err
			}()
		}
		for range order {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := m.RestoreEnd("c", id); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()

	if len(removed) == 0 {
		t.Fatal("no removal raced the restore")
	}
	for _, h := range held {
		info, err := m.Query(h.Key)
		switch {
		case removed[h.Key] && err == nil:
			t.Fatalf("%s removed during the restore, back: %+v", h.Key, info)
		case !removed[h.Key] && (err != nil || info.CRC != h.CRC):
			t.Fatalf("%s not restored: %+v %v", h.Key, info, err)
		}
	}
	t.Logf("%d reports, %d removed while restored", n, len(removed))
	checkListedExist(t, m, keysOf(held)) // removed keys unlisted, the rest listed
	checkRestored(t, m)
}

func keysOf(held []HeldObject) []string {
	out := make([]string, len(held))
	for i, h := range held {
		out[i] = h.Key
	}
	return out
}
