package master

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestAboveHighWatermarkPutMakesRoom is Mooncake #2187: with the pool above
// the high watermark and no Tick in between, every put still succeeds by
// evicting least recently used objects itself; and when nothing can be
// evicted (all leased or hard-pinned) the put fails at once with
// NO_AVAILABLE_HANDLE instead of waiting.
func TestAboveHighWatermarkPutMakesRoom(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) { aboveHighWatermark(t, durable) })
	}
}

func aboveHighWatermark(t *testing.T, durable bool) {
	m, clk := newTestMaster(t, Config{HighWatermark: 0.5, Durable: durable}, map[string]uint64{"a": 64 * 4096, "b": 64 * 4096})
	for i := range 400 { // far beyond the capacity of 128 objects
		if _, err := m.PutStart("w", fmt.Sprint("k", i), 4096, ReplicateConfig{}); err != nil {
			t.Fatalf("put %d above the high watermark: %v", i, err)
		}
		if err := m.PutEnd("w", fmt.Sprint("k", i), 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	st := m.Stats()
	if st.Evictions == 0 || st.Objects == 0 || st.Used > st.Capacity {
		t.Fatalf("stats after 400 puts: %+v", st)
	}
	if _, err := m.GetReplicaList("k399"); err != nil {
		t.Fatalf("latest object evicted: %v", err)
	}
	// Everything hard-pinned: nothing to evict, the put fails at once.
	m2, _ := newTestMaster(t, Config{Durable: durable}, map[string]uint64{"a": 8 * 4096})
	for i := range 8 {
		mustPut(t, m2, fmt.Sprint(i), 4096-allocSize(m2.Config(), fmt.Sprint(i), 0), ReplicateConfig{HardPin: true})
	}
	start := time.Now()
	_, err := m2.PutStart("w", "x", 4096, ReplicateConfig{})
	if !errors.Is(err, ErrNoSpace) || Code(err) != CodeNoAvailableHandle {
		t.Fatalf("put into a pool of pinned objects: %v (code %d)", err, Code(err))
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("no-space put took %v", d)
	}
	if st := m2.Stats(); st.IncompleteObjects != 0 || st.Used != 8*4096 {
		t.Fatalf("a failed put left state behind: %+v", st)
	}
}

// TestConcurrentPutsOfOneKey is Mooncake #180: identical puts race; exactly
// one wins, the others get OBJECT_ALREADY_EXISTS and no allocation is
// leaked (the used bytes are those of one object).
func TestConcurrentPutsOfOneKey(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) {
			m, _ := newTestMaster(t, Config{Durable: durable}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
			const n = 32
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					id := fmt.Sprint("client", i)
					if _, err := m.PutStart(id, "same", 8192, ReplicateConfig{Replicas: 2}); err != nil {
						errs[i] = err
						return
					}
					errs[i] = m.PutEnd(id, "same", 7)
				})
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case errors.Is(err, ErrObjectExists) && Code(err) == CodeObjectExists:
				default:
					t.Fatalf("unexpected error: %v", err)
				}
			}
			if won != 1 {
				t.Fatalf("%d puts won", won)
			}
			st := m.Stats()
			info, _ := m.Query("same")
			var want uint64
			for range info.Replicas {
				want += allocSize(m.Config(), "same", 8192)
			}
			if st.Used != want || st.Objects != 1 || st.IncompleteObjects != 0 {
				t.Fatalf("used %d want %d, stats %+v", st.Used, want, st)
			}
		})
	}
}

// allocSize is what one replica of key occupies in a segment.
func allocSize(cfg Config, key string, size uint64) uint64 {
	cfg = cfg.withDefaults()
	n := size
	if cfg.Durable {
		n += headerLen(key)
	}
	return (n + cfg.Align - 1) &^ (cfg.Align - 1)
}
