package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
	"go.uber.org/goleak"
)

func TestPutGetListRemove(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		goleak.VerifyNone(t, ignore, goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"))
	})
	c := newCluster(t, master.Config{}, 2, 4<<20)
	cl := c.client(nil)
	ctx := ctxT(t)

	for _, n := range []int{1, 100, 4096, 64 << 10, 1 << 20} {
		key := fmt.Sprintf("obj/%d", n)
		v := value(key, n)
		if err := cl.Put(ctx, key, v); err != nil {
			t.Fatalf("put %d: %v", n, err)
		}
		got, err := cl.Get(ctx, key)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %d: equal=%v err=%v", n, bytes.Equal(got, v), err)
		}
	}
	if err := cl.Put(ctx, "obj/1", []byte("x")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("put of existing key: %v", err)
	}
	// an upsert of a key read a moment ago (leased) replaces it: no lease check, as Mooncake's
	if err := cl.Upsert(ctx, "obj/1", []byte("y")); err != nil {
		t.Fatalf("upsert of a key read a moment ago: %v", err)
	}
	if got, _ := cl.Get(ctx, "obj/1"); string(got) != "y" {
		t.Fatalf("after upsert of a leased key: %q", got)
	}
	cl.Put(ctx, "up", []byte("x"))
	if err := cl.Upsert(ctx, "up", []byte("y")); err != nil {
		t.Fatal(err)
	}
	if got, _ := cl.Get(ctx, "up"); string(got) != "y" {
		t.Fatalf("after upsert: %q", got)
	}
	if _, err := cl.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get of missing key: %v", err)
	}
	var re *store.RemoteError
	if _, err := cl.Get(ctx, "missing"); !errors.As(err, &re) || re.Code != master.CodeObjectNotFound {
		t.Fatalf("missing key code: %v", err)
	}
	if ok, err := cl.Exist(ctx, "obj/100"); !ok || err != nil {
		t.Fatalf("exist: %v %v", ok, err)
	}
	info, err := cl.Stat(ctx, "obj/4096")
	if err != nil || info.Size != 4096 || info.CRC32C != store.Checksum(value("obj/4096", 4096)) || len(info.Replicas) != 1 {
		t.Fatalf("stat: %+v %v", info, err)
	}
	keys, next, err := cl.List(ctx, "obj/", "", 3)
	if err != nil || len(keys) != 3 || next == "" || keys[0].Key != "obj/1" {
		t.Fatalf("list page 1: %v %q %v", keys, next, err)
	}
	keys2, next2, _ := cl.List(ctx, "obj/", next, 3)
	if len(keys2) != 2 || next2 != "" {
		t.Fatalf("list page 2: %v %q", keys2, next2)
	}
	// Removing a key we just read is refused (lease) unless forced.
	if err := cl.Remove(ctx, "obj/100", false); !errors.Is(err, store.ErrHasLease) {
		t.Fatalf("remove of leased: %v", err)
	}
	if err := cl.Remove(ctx, "obj/100", true); err != nil {
		t.Fatal(err)
	}
	if n, err := cl.RemoveByRegex(ctx, "^obj/", true); err != nil || n != 4 {
		t.Fatalf("remove by regex: %d %v", n, err)
	}
	if _, err := cl.RemoveByRegex(ctx, "(", true); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("bad regex: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	c := newCluster(t, master.Config{MaxKeyLen: 64}, 2, 1<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	tests := []struct {
		name  string
		key   string
		value []byte
		opts  store.PutOptions
		want  error
	}{
		{"empty key", "", []byte("x"), store.PutOptions{}, store.ErrInvalid},
		{"oversized key", strings.Repeat("k", 65), []byte("x"), store.PutOptions{}, store.ErrInvalid},
		{"empty value", "k", nil, store.PutOptions{}, store.ErrInvalid},
		{"larger than any segment", "big", make([]byte, 2<<20), store.PutOptions{}, store.ErrTooLarge},
		{"negative replicas", "k", []byte("x"), store.PutOptions{Replicas: -2}, store.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := cl.PutWith(ctx, tc.key, tc.value, tc.opts); !errors.Is(err, tc.want) {
				t.Fatalf("err=%v want %v", err, tc.want)
			}
		})
	}
	// More replicas than segments: best effort, reported by Stat.
	if err := cl.PutWith(ctx, "r3", []byte("abc"), store.PutOptions{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	info, _ := cl.Stat(ctx, "r3")
	if len(info.Replicas) != 2 || info.Replicas[0].Segment == info.Replicas[1].Segment {
		t.Fatalf("best-effort replicas: %+v", info.Replicas)
	}
	if _, err := cl.Get(ctx, ""); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("get of empty key: %v", err)
	}
	// The service keeps serving after bad input.
	if got, err := cl.Get(ctx, "r3"); err != nil || string(got) != "abc" {
		t.Fatalf("after bad input: %q %v", got, err)
	}
}

func TestGetIntoPutFromAndBatches(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 4<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	reg := make([]byte, 1<<20)
	if err := cl.RegisterBuffer(reg); err != nil {
		t.Fatal(err)
	}
	defer cl.UnregisterBuffer(reg)
	src := reg[:64<<10]
	copy(src, value("zc", len(src)))
	if err := cl.PutFrom(ctx, "zc", src, store.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	dst := reg[512<<10:]
	n, err := cl.GetInto(ctx, "zc", dst)
	if err != nil || n != len(src) || !bytes.Equal(dst[:n], value("zc", len(src))) {
		t.Fatalf("get into: n=%d err=%v", n, err)
	}
	if _, err := cl.GetInto(ctx, "zc", dst[:100]); !errors.Is(err, store.ErrBufferTooSmall) {
		t.Fatalf("small buffer: %v", err)
	}

	keys := []string{"b/0", "b/1", "b/2", "b/3"}
	vals := [][]byte{value("b/0", 10), value("b/1", 5000), value("b/2", 70000), value("b/3", 1)}
	for i, err := range cl.BatchPut(ctx, keys, vals, store.PutOptions{Replicas: 2}) {
		if err != nil {
			t.Fatalf("batch put %d: %v", i, err)
		}
	}
	berrs := cl.BatchPut(ctx, []string{"b/0", "b/new", ""}, [][]byte{[]byte("x"), []byte("y"), []byte("z")}, store.PutOptions{})
	if !errors.Is(berrs[0], store.ErrExists) || berrs[1] != nil || !errors.Is(berrs[2], store.ErrInvalid) {
		t.Fatalf("batch put per-key outcomes: %v", berrs)
	}
	if info, _ := cl.Stat(ctx, "b/2"); len(info.Replicas) != 2 {
		t.Fatalf("batch put replicas: %+v", info.Replicas)
	}
	got, errs := cl.BatchGet(ctx, append(keys, "b/missing"))
	for i := range keys {
		if errs[i] != nil || !bytes.Equal(got[i], vals[i]) {
			t.Fatalf("batch get %d: %v", i, errs[i])
		}
	}
	if !errors.Is(errs[4], store.ErrNotFound) {
		t.Fatalf("batch get of missing: %v", errs[4])
	}
	ex, err := cl.BatchExist(ctx, []string{"b/missing", "b/2", "b/0"})
	if err != nil || ex[0] || !ex[1] || !ex[2] {
		t.Fatalf("batch exist order: %v %v", ex, err)
	}
	rerrs := cl.BatchRemove(ctx, []string{"b/0", "b/missing"}, true)
	if rerrs[0] != nil || !errors.Is(rerrs[1], store.ErrNotFound) {
		t.Fatalf("batch remove: %v", rerrs)
	}
	ns, gerrs := cl.BatchGetInto(ctx, []string{"zc"}, [][]byte{dst})
	if gerrs[0] != nil || ns[0] != len(src) {
		t.Fatalf("batch get into: %v", gerrs)
	}
}

// TestNodeKilled: a node holding one replica dies; reads use the survivor,
// and the master drops the dead node's replicas after its TTL.
func TestNodeKilled(t *testing.T) {
	c := newCluster(t, master.Config{ClientTTL: 2 * time.Second}, 2, 4<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	var keys []string
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		keys = append(keys, k)
		if err := cl.PutWith(ctx, k, value(k, 10000), store.PutOptions{Replicas: 2}); err != nil {
			t.Fatal(err)
		}
	}
	dead := c.nodes[0]
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		got, err := cl.Get(ctx, k)
		if err != nil || !bytes.Equal(got, value(k, 10000)) {
			t.Fatalf("get %s after node death: %v", k, err)
		}
	}
	vals, errs := cl.BatchGet(ctx, keys)
	for i, k := range keys {
		if errs[i] != nil || !bytes.Equal(vals[i], value(k, 10000)) {
			t.Fatalf("batch get %s after node death: %v", k, errs[i])
		}
	}
	waitfor.Cond(t, 10*time.Second, "master to drop the dead node", func() bool {
		info, err := cl.Stat(ctx, keys[0])
		return err == nil && len(info.Replicas) == 1 && info.Replicas[0].Segment == c.nodes[1].Name()
	})
	for _, k := range keys {
		if got, err := cl.Get(ctx, k); err != nil || !bytes.Equal(got, value(k, 10000)) {
			t.Fatalf("get %s after drop: %v", k, err)
		}
	}
	// New puts land on the survivor only.
	if err := cl.PutWith(ctx, "after", []byte("x"), store.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	if info, _ := cl.Stat(ctx, "after"); len(info.Replicas) != 1 {
		t.Fatalf("replicas after node death: %+v", info.Replicas)
	}
}

// TestCorruptReplica: a flipped byte in one replica is detected by the
// CRC32C and the next replica is used; with every replica corrupt the
// client refuses the data.
func TestCorruptReplica(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 4<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	// 5000 bytes: one request; 1 MiB+13: read in parts (pipelined CRC),
	// with the flipped byte in the last, shorter part.
	for _, tc := range []struct{ size, flip int }{{5000, 1234}, {1<<20 + 13, 1<<20 + 5}} {
		key := fmt.Sprintf("c/%d", tc.size)
		v := value(key, tc.size)
		if err := cl.PutWith(ctx, key, v, store.PutOptions{Replicas: 2}); err != nil {
			t.Fatal(err)
		}
		info, _ := cl.Stat(ctx, key)
		for i, r := range info.Replicas {
			n := nodeOf(c, r)
			seg := n.Client().Segment()
			seg[replicaOffset(t, n, r)+tc.flip] ^= 0xff
			got, err := cl.Get(ctx, key)
			if i == 0 {
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("%s: one corrupt replica: %v", key, err)
				}
				vals, errs := cl.BatchGet(ctx, []string{key, key})
				for j := range vals {
					if errs[j] != nil || !bytes.Equal(vals[j], v) {
						t.Fatalf("%s: batch get with one corrupt replica: %v", key, errs[j])
					}
				}
				continue
			}
			if !errors.Is(err, store.ErrCorrupt) || got != nil {
				t.Fatalf("%s: all replicas corrupt: got %d bytes, err %v", key, len(got), err)
			}
		}
	}
}

// slowMover delays reads, to outlive a lease.
type slowMover struct {
	store.Mover
	delay time.Duration
	slow  atomic.Bool
}

func (m *slowMover) Transfer(ctx context.Context, reqs []transfer.Request) error {
	if m.slow.Load() && reqs[0].Op == transfer.OpRead {
		select {
		case <-time.After(m.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return m.Mover.Transfer(ctx, reqs)
}

func TestLeaseExpiresDuringSlowRead(t *testing.T) {
	c := newCluster(t, master.Config{LeaseTTL: 2 * time.Second}, 1, 1<<20)
	var sm *slowMover
	cl := c.client(func(cfg *store.Config) {
		sm = &slowMover{Mover: cfg.Mover, delay: 30 * time.Second}
		cfg.Mover = sm
	})
	ctx := ctxT(t)
	if err := cl.Put(ctx, "k", []byte("value")); err != nil {
		t.Fatal(err)
	}
	sm.slow.Store(true)
	start := time.Now()
	if _, err := cl.Get(ctx, "k"); !errors.Is(err, store.ErrLeaseExpired) {
		t.Fatalf("slow read: %v", err)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatal("the read was not cut at the end of its lease")
	}
	sm.slow.Store(false)
	if got, err := cl.Get(ctx, "k"); err != nil || string(got) != "value" {
		t.Fatalf("retry after lease expiry: %q %v", got, err)
	}
}

// TestMasterRestart: nodes remount on the new master, which has no
// objects, so the old key is never served; new puts work.
func TestMasterRestart(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 1<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	if err := cl.PutWith(ctx, "old", value("old", 1000), store.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	c.restartMaster()
	if _, err := cl.Get(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stale read after master restart: %v", err)
	}
	// The node counts a remount when the master's answer arrives, just
	// after the master has the segment: wait for both.
	waitfor.Cond(t, 10*time.Second, "nodes to remount", func() bool {
		for _, n := range c.nodes {
			if n.Client().Remounts() < 1 {
				return false
			}
		}
		return len(c.master.Core().Segments()) == 2
	})
	if err := cl.PutWith(ctx, "old", value("new", 1000), store.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.Get(ctx, "old"); err != nil || !bytes.Equal(got, value("new", 1000)) {
		t.Fatalf("get after restart: %v", err)
	}
}

// TestConcurrentRemoveAll: RemoveAll runs while clients write and read.
// A read returns the exact value written or ErrNotFound, never other data.
// Half the keys are only written: a key read once holds a lease (10 s)
// that RemoveAll(force=false) respects, so on a fast machine the read keys
// were all leased before the first RemoveAll and nothing was removed; the
// written-only keys are removed while the others are read, and their space
// is taken again by the writes.
func TestConcurrentRemoveAll(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 4<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	var stop atomic.Bool
	var gets, hits atomic.Int64
	errc := make(chan error, 16)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := fmt.Sprintf("w%d/%d", w, i%16)
				v := value(k, 2000+w)
				if err := cl.Upsert(ctx, k, v); err != nil && !errors.Is(err, store.ErrHasLease) && !errors.Is(err, store.ErrExists) {
					errc <- fmt.Errorf("upsert %s: %w", k, err)
					return
				}
				if i%16 >= 8 { // written only
					continue
				}
				got, err := cl.Get(ctx, k)
				gets.Add(1)
				switch {
				case err == nil:
					hits.Add(1)
					if !bytes.Equal(got, v) {
						errc <- fmt.Errorf("get %s returned wrong data", k)
						return
					}
				case !errors.Is(err, store.ErrNotFound):
					errc <- fmt.Errorf("get %s: %w", k, err)
					return
				}
			}
		}()
	}
	removed := 0
	for range 30 {
		n, err := cl.RemoveAll(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		removed += n
		time.Sleep(2 * time.Millisecond) // pacing between RemoveAll calls, not a readiness wait
	}
	stop.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if removed == 0 || hits.Load() == 0 {
		t.Fatalf("no overlap exercised: removed=%d hits=%d gets=%d", removed, hits.Load(), gets.Load())
	}
}

func TestGracefulCloseUnmounts(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 1<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	if err := cl.PutWith(ctx, "k", []byte("v"), store.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	n := c.nodes[0]
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.master.Core().Segment(n.Name()); !errors.Is(err, master.ErrSegmentNotFound) {
		t.Fatalf("segment still mounted after graceful close: %v", err)
	}
	if got, err := cl.Get(ctx, "k"); err != nil || string(got) != "v" {
		t.Fatalf("get after one node left: %q %v", got, err)
	}
}

func TestClientContributesSegment(t *testing.T) {
	c := newCluster(t, master.Config{Strategy: master.StrategyLocalFirst}, 1, 1<<20)
	cl := c.client(func(cfg *store.Config) { cfg.SegmentSize = 1 << 20; cfg.UnmountGrace = 100 * time.Millisecond })
	ctx := ctxT(t)
	if err := cl.Put(ctx, "local", value("local", 3000)); err != nil {
		t.Fatal(err)
	}
	info, _ := cl.Stat(ctx, "local")
	if info.Replicas[0].Segment != cl.SegmentName() {
		t.Fatalf("local-first put landed on %s, not our segment %s", info.Replicas[0].Segment, cl.SegmentName())
	}
	if got, err := cl.Get(ctx, "local"); err != nil || !bytes.Equal(got, value("local", 3000)) {
		t.Fatalf("local read: %v", err)
	}

}

// hangMover never completes reads from one endpoint (a hung node).
type hangMover struct {
	store.Mover
	hung string
	ids  sync.Map // SegmentID -> endpoint
}

func (m *hangMover) OpenSegment(ctx context.Context, name string) (transfer.SegmentID, error) {
	id, err := m.Mover.OpenSegment(ctx, name)
	m.ids.Store(id, name)
	return id, err
}

func (m *hangMover) Transfer(ctx context.Context, reqs []transfer.Request) error {
	if ep, _ := m.ids.Load(reqs[0].Segment); ep == m.hung && reqs[0].Op == transfer.OpRead {
		<-ctx.Done()
		return ctx.Err()
	}
	return m.Mover.Transfer(ctx, reqs)
}

// TestHungReplicaFallsBack: a replica whose node never answers costs part
// of the lease, and the read completes from the next replica.
func TestHungReplicaFallsBack(t *testing.T) {
	c := newCluster(t, master.Config{LeaseTTL: 4 * time.Second}, 2, 1<<20)
	hm := &hangMover{}
	cl := c.client(func(cfg *store.Config) {
		hm.Mover = cfg.Mover
		cfg.Mover = hm
	})
	ctx := ctxT(t)
	v := value("h", 3000)
	if err := cl.PutWith(ctx, "h", v, store.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	info, _ := cl.Stat(ctx, "h")
	hm.hung = info.Replicas[0].Endpoint // the replica tried first
	got, err := cl.Get(ctx, "h")
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get with a hung replica: %v", err)
	}
}

// TestPutsBeyondCapacityEvict: writing three times the pool's capacity
// succeeds (the master evicts least recently used objects), the latest
// values stay readable and intact.
func TestPutsBeyondCapacityEvict(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 1<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	const n, size = 96, 64 << 10 // 6 MiB into 2 MiB
	for i := range n {
		k := fmt.Sprintf("e/%03d", i)
		if err := cl.Put(ctx, k, value(k, size)); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	st := c.master.Core().Stats()
	if st.Evictions == 0 || st.UtilisationAtFirstEviction < 0.9 {
		t.Fatalf("evictions=%d utilisation at first eviction %.3f", st.Evictions, st.UtilisationAtFirstEviction)
	}
	k := fmt.Sprintf("e/%03d", n-1)
	if got, err := cl.Get(ctx, k); err != nil || !bytes.Equal(got, value(k, size)) {
		t.Fatalf("latest key after eviction: %v", err)
	}
	if _, err := cl.Get(ctx, "e/000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("oldest key should have been evicted: %v", err)
	}
}

// failBatchMover fails every transfer of more than one request or of a
// scatter-gather request (a batch coalesced), so batch calls must fall
// back to per-key operations.
type failBatchMover struct {
	store.Mover
	failed atomic.Int64
}

func (m *failBatchMover) Transfer(ctx context.Context, reqs []transfer.Request) error {
	if len(reqs) > 1 || (len(reqs) == 1 && len(reqs[0].Extents) > 1) {
		m.failed.Add(1)
		return errors.New("injected batch failure")
	}
	return m.Mover.Transfer(ctx, reqs)
}

func TestBatchFallbacks(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 1<<20)
	fm := &failBatchMover{}
	cl := c.client(func(cfg *store.Config) {
		fm.Mover = cfg.Mover
		cfg.Mover = fm
	})
	ctx := ctxT(t)
	keys := []string{"f/0", "f/1", "f/2"}
	vals := [][]byte{value("f/0", 100), value("f/1", 3000), value("f/2", 100000)}
	for i, err := range cl.BatchPut(ctx, keys, vals, store.PutOptions{}) {
		if err != nil {
			t.Fatalf("batch put %d after fallback: %v", i, err)
		}
	}
	got, errs := cl.BatchGet(ctx, keys)
	for i := range keys {
		if errs[i] != nil || !bytes.Equal(got[i], vals[i]) {
			t.Fatalf("batch get %d after fallback: %v", i, errs[i])
		}
	}
	if fm.failed.Load() != 2 {
		t.Fatalf("injected failures %d: the batched paths were not taken", fm.failed.Load())
	}
	if st := c.master.Core().Stats(); st.IncompleteObjects != 0 || st.Objects != 3 {
		t.Fatalf("after fallback: %+v", st)
	}
}

// TestTransports runs a replicated round trip and a node failure over each
// data transport: shared memory (auto, same host) and TCP.
func TestTransports(t *testing.T) {
	for _, tr := range []string{"auto", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			c := newClusterTransport(t, master.Config{}, 2, 4<<20, tr)
			cl := c.client(nil)
			ctx := ctxT(t)
			for _, n := range []int{100, 64 << 10, 1 << 20} {
				k := fmt.Sprintf("t/%d", n)
				if err := cl.PutWith(ctx, k, value(k, n), store.PutOptions{Replicas: 2}); err != nil {
					t.Fatal(err)
				}
			}
			c.nodes[0].Kill()
			for _, n := range []int{100, 64 << 10, 1 << 20} {
				k := fmt.Sprintf("t/%d", n)
				if got, err := cl.Get(ctx, k); err != nil || !bytes.Equal(got, value(k, n)) {
					t.Fatalf("get %s over %s after a node died: %v", k, tr, err)
				}
			}
		})
	}
}

// TestConcurrentPutsOfOneSlice: the same large slice put under several
// keys at once (it can be registered only once) is stored intact each time.
func TestConcurrentPutsOfOneSlice(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 8<<20)
	cl := c.client(func(cfg *store.Config) { cfg.LocalBufferSize = 256 << 10 })
	ctx := ctxT(t)
	v := value("shared", 512<<10) // larger than the staging buffer
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cl.Put(ctx, fmt.Sprintf("same/%d", i), v)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if got, err := cl.Get(ctx, fmt.Sprintf("same/%d", i)); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %d: %v", i, err)
		}
	}
}

// TestPreferLocal: under the random strategy, PreferLocal puts land on the
// client's own segment.
func TestPreferLocal(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 1<<20)
	cl := c.client(func(cfg *store.Config) { cfg.SegmentSize = 1 << 20; cfg.UnmountGrace = 100 * time.Millisecond })
	ctx := ctxT(t)
	for i := range 12 {
		k := fmt.Sprintf("pl/%d", i)
		if err := cl.PutWith(ctx, k, []byte("v"), store.PutOptions{PreferLocal: true}); err != nil {
			t.Fatal(err)
		}
		if info, _ := cl.Stat(ctx, k); info.Replicas[0].Segment != cl.SegmentName() {
			t.Fatalf("PreferLocal put landed on %s, not %s", info.Replicas[0].Segment, cl.SegmentName())
		}
	}
}
