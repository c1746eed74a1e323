package hotcache

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

func mustNew(t *testing.T, cfg Config) *Cache {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func val(n int, b byte) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = b
	}
	return v
}

// touch looks key up n times.
func touch(c *Cache, key string, n int) {
	for range n {
		c.Lookup(key)
	}
}

func TestValidate(t *testing.T) {
	for _, cfg := range []Config{{}, {Capacity: 1, Threshold: -1}, {Capacity: 1, Threshold: 256}, {Capacity: 1, SketchWidth: -1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	c := mustNew(t, Config{Capacity: 1 << 10, MaxEntry: 1 << 20})
	if got := c.Config(); got.MaxEntry != 1<<10 || got.Threshold != DefaultThreshold || got.SketchWidth != DefaultSketchWidth {
		t.Errorf("defaults: %+v", got)
	}
}

func TestAdmissionThreshold(t *testing.T) {
	for _, th := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(th), func(t *testing.T) {
			c := mustNew(t, Config{Capacity: 1 << 20, Threshold: th})
			for i := 1; i <= th; i++ {
				c.Lookup("k")
				want := i >= th
				if got := c.Wants("k", 10); got != want {
					t.Fatalf("after %d lookups Wants = %v, want %v", i, got, want)
				}
				if got := c.Offer("k", Entry{Version{1, uint64(i), 0}, val(10, 1)}); got != want {
					t.Fatalf("after %d lookups Offer = %v, want %v", i, got, want)
				}
			}
			if e, ok := c.Lookup("k"); !ok || e.Seq != uint64(th) {
				t.Fatalf("Lookup = %+v %v", e.Version, ok)
			}
		})
	}
}

func TestTooLargeAndEmpty(t *testing.T) {
	c := mustNew(t, Config{Capacity: 100, MaxEntry: 50, Threshold: 1})
	touch(c, "k", 3)
	if c.Wants("k", 51) || c.Offer("k", Entry{Value: val(51, 1)}) {
		t.Fatal("a value over MaxEntry was admitted")
	}
	if c.Offer("k", Entry{}) {
		t.Fatal("an empty value was admitted")
	}
	if st := c.Stats(); st.Rejected != 2 || st.Entries != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBoundedAndLRU(t *testing.T) {
	c := mustNew(t, Config{Capacity: 300, Threshold: 1})
	for i := range 3 {
		k := fmt.Sprint("k", i)
		touch(c, k, 1)
		if !c.Offer(k, Entry{Version{1, 1, 0}, val(100, byte(i))}) {
			t.Fatalf("%s refused", k)
		}
	}
	touch(c, "k1", 1) // k1 is now the least recent of three equally frequent keys (2 accesses)
	touch(c, "k2", 1)
	touch(c, "k0", 1)
	touch(c, "k3", 2)
	if c.Offer("k3", Entry{Version{1, 1, 0}, val(100, 3)}) {
		t.Fatal("k3 evicted a key as frequent as itself")
	}
	touch(c, "k3", 1)
	if !c.Offer("k3", Entry{Version{1, 1, 0}, val(100, 3)}) {
		t.Fatal("k3 (now the most frequent) refused")
	}
	if _, ok := c.Lookup("k1"); ok {
		t.Fatal("k1 (least recent) kept")
	}
	for _, k := range []string{"k0", "k2", "k3"} {
		if _, ok := c.Lookup(k); !ok {
			t.Fatalf("%s evicted", k)
		}
	}
	if st := c.Stats(); st.Bytes != 300 || st.Entries != 3 || st.Evicted != 1 || st.Rejected != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestColdCandidateDoesNotEvictHot(t *testing.T) {
	c := mustNew(t, Config{Capacity: 200, Threshold: 2})
	touch(c, "hot", 20)
	if !c.Offer("hot", Entry{Version{1, 1, 0}, val(200, 1)}) {
		t.Fatal("hot refused")
	}
	touch(c, "cold", 2)
	if c.Offer("cold", Entry{Version{1, 1, 0}, val(100, 2)}) {
		t.Fatal("a cold value evicted a hot one")
	}
	if _, ok := c.Lookup("hot"); !ok {
		t.Fatal("hot gone")
	}
	touch(c, "cold", 40) // now hotter
	if !c.Offer("cold", Entry{Version{1, 1, 0}, val(100, 2)}) {
		t.Fatal("a hotter value refused")
	}
}

func TestVersions(t *testing.T) {
	c := mustNew(t, Config{Capacity: 1000, Threshold: 1})
	touch(c, "k", 1)
	if !c.Offer("k", Entry{Version{1, 5, 0}, val(10, 5)}) {
		t.Fatal("seq 5 refused")
	}
	if c.Offer("k", Entry{Version{1, 4, 0}, val(10, 4)}) {
		t.Fatal("an older seq replaced a newer one")
	}
	if c.Offer("k", Entry{Version{1, 5, 0}, val(10, 5)}) {
		t.Fatal("the same version offered twice was taken")
	}
	if !c.Offer("k", Entry{Version{1, 6, 0}, val(20, 6)}) {
		t.Fatal("a newer seq refused")
	}
	if !c.Offer("k", Entry{Version{2, 1, 0}, val(30, 1)}) {
		t.Fatal("another view refused")
	}
	e, _ := c.Lookup("k")
	if e.View != 2 || e.Seq != 1 || len(e.Value) != 30 {
		t.Fatalf("entry %+v", e.Version)
	}
	if st := c.Stats(); st.Bytes != 30 || st.Entries != 1 || st.Invalidated != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRemove(t *testing.T) {
	c := mustNew(t, Config{Capacity: 1000, Threshold: 1})
	for i := range 6 {
		k := fmt.Sprintf("p%d/k", i%2)
		k += fmt.Sprint(i)
		touch(c, k, 1)
		c.Offer(k, Entry{Version{1, 1, 0}, val(10, 1)})
	}
	if !c.Remove("p0/k0") || c.Remove("p0/k0") {
		t.Fatal("Remove")
	}
	if c.RemoveVersion("p0/k2", Version{1, 2, 0}) || !c.RemoveVersion("p0/k2", Version{1, 1, 0}) {
		t.Fatal("RemoveVersion")
	}
	if n := c.RemoveIf(func(k string) bool { return k[:2] == "p1" }); n != 3 {
		t.Fatalf("RemoveIf dropped %d", n)
	}
	if n := c.Clear(); n != 1 {
		t.Fatalf("Clear dropped %d", n)
	}
	if st := c.Stats(); st.Bytes != 0 || st.Entries != 0 || st.Invalidated != 6 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSketchAges(t *testing.T) {
	c := mustNew(t, Config{Capacity: 1000, SketchWidth: 16})
	touch(c, "k", 30)
	before := c.Estimate("k")
	if before < 30 {
		t.Fatalf("estimate %d after 30 accesses", before)
	}
	// 64 accesses (16 x 4) halve every counter: other keys' accesses age k.
	for i := range 64 {
		c.Lookup(fmt.Sprint("other", i))
	}
	if after := c.Estimate("k"); after >= before || after < 5 {
		t.Fatalf("estimate %d after aging, %d before", after, before)
	}
}

// TestConcurrent drives every method from several goroutines (run with
// -race) and checks the byte bound and the index after each batch.
func TestConcurrent(t *testing.T) {
	c := mustNew(t, Config{Capacity: 4096, Threshold: 1, SketchWidth: 64})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 3000 {
				k := fmt.Sprint("k", r.IntN(64))
				switch r.IntN(10) {
				case 0:
					c.Remove(k)
				case 1, 2, 3:
					c.Offer(k, Entry{Version{1, uint64(i), 0}, val(1+r.IntN(300), 1)})
				default:
					if e, ok := c.Lookup(k); ok && len(e.Value) == 0 {
						t.Error("empty entry served")
					}
				}
				if st := c.Stats(); st.Bytes > st.Capacity {
					t.Errorf("%d bytes held, capacity %d", st.Bytes, st.Capacity)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := c.Stats()
	var sum uint64
	c.mu.Lock()
	for _, n := range c.items {
		sum += uint64(len(n.e.Value))
	}
	listed := 0
	for n := c.head.next; n != &c.head; n = n.next {
		listed++
	}
	c.mu.Unlock()
	if sum != st.Bytes || listed != st.Entries {
		t.Fatalf("index: %d bytes / %d listed, stats %+v", sum, listed, st)
	}
}
