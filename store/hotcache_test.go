package store_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// readCounter counts the READ requests a client sends (it hides
// TransferUntil, so every transfer goes through Transfer).
type readCounter struct {
	store.Mover
	reads atomic.Int64
}

func (m *readCounter) Transfer(ctx context.Context, reqs []transfer.Request) error {
	for _, r := range reqs {
		if r.Op == transfer.OpRead {
			m.reads.Add(1)
		}
	}
	return m.Mover.Transfer(ctx, reqs)
}

func hotStats(t *testing.T, c *store.Client) store.HotCacheStats {
	t.Helper()
	st, ok := c.HotCacheStats()
	if !ok {
		t.Fatal("hot cache off")
	}
	return st
}

// TestHotCache: a reader serves a hot key from its cache (no READ), and
// sees another client's overwrite (same size) and removal at once.
func TestHotCache(t *testing.T) {
	c := newCluster(t, master.Config{}, 1, 8<<20)
	writer := c.client(nil)
	var rc *readCounter
	reader := c.client(func(cfg *store.Config) {
		rc = &readCounter{Mover: cfg.Mover}
		cfg.Mover = rc
		cfg.HotCache = store.HotCacheConfig{Size: 1 << 20}
	})
	ctx := ctxT(t)
	for _, n := range []int{100, 4096, 256 << 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			key := fmt.Sprint("hot/", n)
			v1, v2 := value(key, n), value(key+"'", n)
			if err := writer.Put(ctx, key, v1); err != nil {
				t.Fatal(err)
			}
			before := hotStats(t, reader)
			for i := range 2 { // the second read admits it (threshold 2)
				if got, err := reader.Get(ctx, key); err != nil || !bytes.Equal(got, v1) {
					t.Fatalf("read %d: equal=%v err=%v", i, bytes.Equal(got, v1), err)
				}
			}
			reads := rc.reads.Load()
			got, err := reader.Get(ctx, key)
			if err != nil || !bytes.Equal(got, v1) {
				t.Fatalf("cached read: equal=%v err=%v", bytes.Equal(got, v1), err)
			}
			got[0] ^= 0xff // the caller's copy: the cache's stays intact
			dst := make([]byte, n)
			if k, err := reader.GetInto(ctx, key, dst); err != nil || k != n || !bytes.Equal(dst, v1) {
				t.Fatalf("cached get-into: %d %v", k, err)
			}
			if d := rc.reads.Load() - reads; d != 0 {
				t.Fatalf("cached reads sent %d READs", d)
			}
			st := hotStats(t, reader)
			if st.Hits-before.Hits != 2 || st.Misses-before.Misses != 2 || st.HitLatency.Count-before.HitLatency.Count != 2 {
				t.Fatalf("stats: %+v (before %+v)", st, before)
			}
			if err := writer.Upsert(ctx, key, v2); err != nil {
				t.Fatal(err)
			}
			if got, err := reader.Get(ctx, key); err != nil || !bytes.Equal(got, v2) {
				t.Fatalf("read after another client's overwrite: equal v2=%v equal v1=%v err=%v", bytes.Equal(got, v2), bytes.Equal(got, v1), err)
			}
			if st2 := hotStats(t, reader); st2.Stale-st.Stale != 1 {
				t.Fatalf("stale count %d -> %d", st.Stale, st2.Stale)
			}
			if err := writer.Remove(ctx, key, true); err != nil {
				t.Fatal(err)
			}
			if _, err := reader.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("read after another client's removal: %v", err)
			}
		})
	}
	st := hotStats(t, reader)
	if st.Entries != 0 || st.Bytes != 0 || st.Capacity != 1<<20 {
		t.Fatalf("after removals: %+v", st)
	}
}

// TestHotCacheLocalInvalidation: the client's own puts and removes drop
// its entries at once.
func TestHotCacheLocalInvalidation(t *testing.T) {
	c := newCluster(t, master.Config{}, 1, 8<<20)
	cl := c.client(func(cfg *store.Config) { cfg.HotCache = store.HotCacheConfig{Size: 1 << 20, AdmissionThreshold: 1} })
	ctx := ctxT(t)
	fill := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if err := c.client(nil).Put(ctx, k, value(k, 1000)); err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Get(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries := func(want int) {
		t.Helper()
		if st := hotStats(t, cl); st.Entries != want {
			t.Fatalf("%d entries, want %d", st.Entries, want)
		}
	}
	fill("a/1", "a/2", "b/1", "b/2")
	entries(4)
	if err := cl.Upsert(ctx, "a/1", []byte("new")); err != nil {
		t.Fatal(err)
	}
	entries(3)
	if got, err := cl.Get(ctx, "a/1"); err != nil || string(got) != "new" {
		t.Fatalf("read own overwrite: %q %v", got, err)
	}
	if err := cl.Remove(ctx, "a/2", true); err != nil {
		t.Fatal(err)
	}
	entries(3) // a/1 (admitted again), b/1, b/2
	if _, err := cl.RemoveByRegex(ctx, "^b/", true); err != nil {
		t.Fatal(err)
	}
	entries(1)
	if _, err := cl.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	entries(0)
}

func TestHotCacheConfig(t *testing.T) {
	c := newCluster(t, master.Config{}, 0, 0)
	eng, err := transfer.Open(ctxT(t), transfer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	_, err = store.New(ctxT(t), store.Config{Master: c.master.Addr(), Mover: eng, HotCache: store.HotCacheConfig{Size: 1, AdmissionThreshold: 300}})
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("threshold 300: %v", err)
	}
	if _, ok := c.client(nil).HotCacheStats(); ok {
		t.Fatal("hot cache on without a size")
	}
}

// The history of TestHotCacheNoStaleRead: every write, remove and read
// with its invocation and response on one logical clock.
type (
	hcWrite struct {
		key        int
		start, end int64 // end: when it returned (acknowledged or failed)
		acked      bool
		remove     bool
	}
	hcRead struct {
		key        int
		start, end int64
		id         int64 // the write whose value came back (a remove's id for ErrNotFound)
	}
)

// hcValue is write id's value of key: the id, then a pattern from both, so
// a torn or mixed read is caught.
func hcValue(key int, id int64, n int) []byte {
	v := make([]byte, n)
	binary.LittleEndian.PutUint64(v, uint64(id))
	for i := 8; i < n; i++ {
		v[i] = byte(id*131 + int64(key)*7 + int64(i))
	}
	return v
}

// TestHotCacheNoStaleRead: writer clients overwrite and remove keys while
// reader clients with the hot cache read them. Every read must return a
// value that was current at some point during the read: written by a write
// that started before the read ended, and not older than any write
// acknowledged before the read started (a write that started after the
// returned one had finished). A key reads as not found while a remove of
// it is current or while an overwrite of it is in flight (the master keeps
// a key invisible from an upsert's start to its commit). A forced remove
// frees a value even while it is read (its lease ignored, as Mooncake's):
// such a read fails its CRC32C check (ErrCorrupt, never a wrong value),
// which is accepted only when a remove of the key overlapped the read.
// Removes are made only by a key's owning writer: a forced remove of
// another client's put in progress frees space that client may still be
// writing. The readers must serve some reads from the
// cache and see some entries go stale, so both paths are exercised.
func TestHotCacheNoStaleRead(t *testing.T) {
	const (
		keys    = 12
		size    = 4096
		writers = 3
		readers = 3
		writes  = 150 // per writer
	)
	c := newCluster(t, master.Config{}, 2, 32<<20)
	ctx := ctxT(t)
	var clock atomic.Int64
	tick := func() int64 { return clock.Add(1) }

	var mu sync.Mutex
	hist := map[int64]*hcWrite{}
	var nextID atomic.Int64
	newWrite := func(key int, remove bool) (int64, *hcWrite) {
		id := nextID.Add(1)
		w := &hcWrite{key: key, remove: remove, start: tick()}
		mu.Lock()
		hist[id] = w
		mu.Unlock()
		return id, w
	}
	finish := func(w *hcWrite, err error) {
		end := tick()
		mu.Lock()
		w.end, w.acked = end, err == nil
		mu.Unlock()
	}
	key := func(k int) string { return fmt.Sprint("hc/", k) }

	seed := c.client(nil)
	for k := range keys {
		id, w := newWrite(k, false)
		finish(w, seed.Put(ctx, key(k), hcValue(k, id, size)))
	}
	var done atomic.Bool
	// exercised: some reader's cache has served a hit and found an entry
	// stale; until then the writers go on past writes (up to 20 times as
	// many), whatever the timing of this machine.
	var exercised atomic.Bool
	var wg sync.WaitGroup
	for g := range writers {
		cl := c.client(nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < writes || (!exercised.Load() && i < 20*writes); i++ {
				// Half the keys are overwritten by every writer, all the
				// time; each key of the other half belongs to one writer,
				// which overwrites and removes it now and then (a forced
				// remove of another writer's put in progress would free
				// space that writer is still writing).
				k := r.IntN(keys / 2)
				if own := keys/2 + g + writers*r.IntN(keys/2/writers); r.IntN(4) == 0 {
					k = own
					if r.IntN(3) == 0 {
						_, w := newWrite(k, true)
						finish(w, cl.Remove(ctx, key(k), true))
						continue
					}
				}
				id, w := newWrite(k, false)
				finish(w, cl.Upsert(ctx, key(k), hcValue(k, id, size)))
			}
		}()
	}
	var reads [readers][]hcRead
	var rwg sync.WaitGroup
	var hc []*store.Client
	for g := range readers {
		cl := c.client(func(cfg *store.Config) { cfg.HotCache = store.HotCacheConfig{Size: 1 << 20, AdmissionThreshold: 1} })
		hc = append(hc, cl)
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 11))
			buf := make([]byte, size)
			if err := cl.RegisterBuffer(buf); err != nil {
				t.Error(err)
				return
			}
			defer cl.UnregisterBuffer(buf)
			check := func(rd hcRead, got []byte, err error) bool {
				switch {
				case errors.Is(err, store.ErrNotFound):
					rd.id = -1 // matched to a remove below
				case errors.Is(err, store.ErrCorrupt):
					rd.id = -2 // refused by its CRC32C: matched to a forced remove below
				case err != nil:
					t.Errorf("read %s: %v", key(rd.key), err)
					return false
				case len(got) != size:
					t.Errorf("read %s: %d bytes", key(rd.key), len(got))
					return false
				default:
					rd.id = int64(binary.LittleEndian.Uint64(got))
					if !bytes.Equal(got, hcValue(rd.key, rd.id, size)) {
						t.Errorf("read %s: value of write %d is torn", key(rd.key), rd.id)
						return false
					}
				}
				reads[g] = append(reads[g], rd)
				return true
			}
			for i := 0; !done.Load() || i < 200; i++ {
				if i%32 == 0 && !exercised.Load() {
					if st, ok := cl.HotCacheStats(); ok && st.Hits > 0 && st.Stale > 0 {
						exercised.Store(true)
					}
				}
				k := r.IntN(keys)
				start := tick()
				switch i % 3 {
				case 0:
					got, err := cl.Get(ctx, key(k))
					if !check(hcRead{key: k, start: start, end: tick()}, got, err) {
						return
					}
				case 1:
					n, err := cl.GetInto(ctx, key(k), buf)
					if !check(hcRead{key: k, start: start, end: tick()}, buf[:n], err) {
						return
					}
				default: // a batch of two keys
					k2 := (k + 1 + r.IntN(keys-1)) % keys
					vals, errs := cl.BatchGet(ctx, []string{key(k), key(k2)})
					end := tick()
					if !check(hcRead{key: k, start: start, end: end}, vals[0], errs[0]) || !check(hcRead{key: k2, start: start, end: end}, vals[1], errs[1]) {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	done.Store(true)
	rwg.Wait()

	mu.Lock()
	defer mu.Unlock()
	byKey := make([][]int64, keys) // write ids by key
	for id, w := range hist {
		byKey[w.key] = append(byKey[w.key], id)
	}
	// current reports whether write id of key could have been current at
	// some point of [start, end]: it started before the read ended, and no
	// write of the key that started after it returned was acknowledged
	// before the read started.
	current := func(key int, id int64, start, end int64) bool {
		w := hist[id]
		if w == nil || w.key != key || w.start > end {
			return false
		}
		for _, o := range byKey[key] {
			if x := hist[o]; x.acked && x.end < start && x.start > w.end {
				return false
			}
		}
		return true
	}
	var n, stale, torn int
	for g := range readers {
		for _, rd := range reads[g] {
			n++
			ok := false
			switch {
			case rd.id >= 0:
				ok = !hist[rd.id].remove && current(rd.key, rd.id, rd.start, rd.end)
			case rd.id == -2: // refused by its CRC32C: only while a forced remove of the key overlapped it
				torn++
				for _, id := range byKey[rd.key] {
					if w := hist[id]; w.remove && w.start < rd.end && w.end > rd.start {
						ok = true
						break
					}
				}
			default: // not found: a remove of the key was current, or an overwrite was in flight (invisible until committed)
				for _, id := range byKey[rd.key] {
					w := hist[id]
					if (w.remove && current(rd.key, id, rd.start, rd.end)) || (!w.remove && w.start < rd.end && w.end > rd.start) {
						ok = true
						break
					}
				}
			}
			if !ok {
				stale++
				if stale <= 5 {
					var near []string // the key's writes around the read
					for _, id := range byKey[rd.key] {
						if w := hist[id]; w.start < rd.end+40 && w.end > rd.start-40 {
							near = append(near, fmt.Sprintf("%d:[%d,%d] acked=%v remove=%v", id, w.start, w.end, w.acked, w.remove))
						}
					}
					t.Errorf("stale read of %s (write %d) in [%d, %d]; writes near: %v", key(rd.key), rd.id, rd.start, rd.end, near)
				}
			}
		}
	}
	var hits, staleEntries uint64
	for _, cl := range hc {
		st := hotStats(t, cl)
		hits, staleEntries = hits+st.Hits, staleEntries+st.Stale
	}
	t.Logf("%d reads checked (%d refused by the CRC32C during a forced remove), %d writes; %d served from the hot cache, %d entries found stale", n, torn, len(hist), hits, staleEntries)
	if stale > 0 {
		t.Fatalf("%d of %d reads stale", stale, n)
	}
	if hits == 0 || staleEntries == 0 {
		t.Fatalf("hits %d, stale entries %d: the cache path was not exercised", hits, staleEntries)
	}
}

func TestHotCacheFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want store.HotCacheConfig
		bad  bool
	}{
		{env: nil, want: store.HotCacheConfig{}},
		{env: map[string]string{store.EnvHotCacheSize: "1073741824", store.EnvHotBlockSize: " 4194304 ", store.EnvHotAdmissionThreshold: "3"},
			want: store.HotCacheConfig{Size: 1 << 30, BlockSize: 4 << 20, AdmissionThreshold: 3}},
		{env: map[string]string{store.EnvHotCacheSize: "-1"}, bad: true},
		{env: map[string]string{store.EnvHotCacheSize: "1gb"}, bad: true},
		{env: map[string]string{store.EnvHotBlockSize: "x"}, bad: true},
		{env: map[string]string{store.EnvHotAdmissionThreshold: "256"}, bad: true},
	} {
		got, err := store.HotCacheFromEnv(func(k string) string { return tc.env[k] })
		if tc.bad {
			if !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%v: err %v", tc.env, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: %+v %v", tc.env, got, err)
		}
	}
}

// TestHotCacheMasterRestart: a restarted master is a new view, so a value
// cached from the old one is never served, whatever sequence numbers the
// new master hands out (durable metadata off: the new master starts empty
// and the key is put again with a same-size value).
func TestHotCacheMasterRestart(t *testing.T) {
	c := newCluster(t, master.Config{}, 1, 8<<20)
	writer := c.client(nil)
	reader := c.client(func(cfg *store.Config) { cfg.HotCache = store.HotCacheConfig{Size: 1 << 20, AdmissionThreshold: 1} })
	ctx := ctxT(t)
	v1, v2 := value("r1", 4096), value("r2", 4096)
	if err := writer.Put(ctx, "rk", v1); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := reader.Get(ctx, "rk"); err != nil || !bytes.Equal(got, v1) {
			t.Fatalf("before restart: %v", err)
		}
	}
	if st := hotStats(t, reader); st.Hits != 1 || st.Entries != 1 {
		t.Fatalf("before restart: %+v", st)
	}
	c.restartMaster()
	// The writer's put lands once its client has remounted on the new master.
	if !waitfor.Within(10*time.Second, func() bool { return writer.Put(ctx, "rk", v2) == nil }) {
		t.Fatal("no put on the restarted master")
	}
	got, err := reader.Get(ctx, "rk")
	if err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("after restart: equal v2=%v equal v1=%v err=%v", bytes.Equal(got, v2), bytes.Equal(got, v1), err)
	}
	if st := hotStats(t, reader); st.Hits != 1 || st.Stale != 1 {
		t.Fatalf("after restart: %+v", st)
	}
}
