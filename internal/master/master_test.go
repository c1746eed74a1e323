package master

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
)

func newFakeClock() *clock.Fake { return clock.NewFake(time.Unix(1_700_000_000, 0)) }

func newTestMaster(t *testing.T, cfg Config, segs map[string]uint64) (*Master, *clock.Fake) {
	t.Helper()
	clk := newFakeClock()
	m, err := New(cfg, clk)
	if err != nil {
		t.Fatal(err)
	}
	base := uint64(1 << 30)
	for _, name := range sortedKeys(segs) {
		spec := SegmentSpec{Name: name, Endpoint: "ep-" + name, Base: base, Size: segs[name]}
		if err := m.MountSegment("client-"+name, spec); err != nil {
			t.Fatal(err)
		}
		base += 1 << 30
	}
	return m, clk
}

func sortedKeys(m map[string]uint64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

func mustPut(t *testing.T, m *Master, key string, size uint64, rc ReplicateConfig) []Replica {
	t.Helper()
	reps, err := m.PutStart("writer", key, size, rc)
	if err != nil {
		t.Fatalf("PutStart %q: %v", key, err)
	}
	if err := m.PutEnd("writer", key, 42); err != nil {
		t.Fatalf("PutEnd %q: %v", key, err)
	}
	return reps
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"bad watermark", Config{HighWatermark: 1.5}, false},
		{"bad ratio", Config{EvictionRatio: -1}, false},
		{"bad strategy", Config{Strategy: "nope"}, false},
		{"bad align", Config{Align: 48}, false},
		{"release before timeout", Config{PutTimeout: time.Hour, PutReleaseTimeout: time.Minute}, false},
		{"local first", Config{Strategy: StrategyLocalFirst}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestPutStartValidation(t *testing.T) {
	m, _ := newTestMaster(t, Config{MaxKeyLen: 8}, map[string]uint64{"a": 4096, "b": 8192})
	tests := []struct {
		name string
		key  string
		size uint64
		rc   ReplicateConfig
		want error
	}{
		{"empty key", "", 10, ReplicateConfig{}, ErrInvalidParams},
		{"oversized key", "123456789", 10, ReplicateConfig{}, ErrInvalidParams},
		{"empty value", "k", 0, ReplicateConfig{}, ErrInvalidParams},
		{"negative replicas", "k", 10, ReplicateConfig{Replicas: -1}, ErrInvalidParams},
		{"too many replicas", "k", 10, ReplicateConfig{Replicas: 17}, ErrInvalidParams},
		{"soft pin too long", "k", 10, ReplicateConfig{SoftPin: true, SoftPinTTL: 25 * time.Hour}, ErrInvalidParams},
		{"larger than any segment", "k", 8193, ReplicateConfig{}, ErrObjectTooLarge},
		{"ok", "k", 10, ReplicateConfig{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.PutStart("c", tc.key, tc.size, tc.rc)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err=%v want %v", err, tc.want)
			}
		})
	}
	if _, err := New(Config{}, nil); err != nil {
		t.Fatal(err)
	}
	empty, _ := New(Config{}, newFakeClock())
	if _, err := empty.PutStart("c", "k", 1, ReplicateConfig{}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put without segments: %v", err)
	}
}

func TestReplicasOnDistinctSegmentsBestEffort(t *testing.T) {
	tests := []struct {
		name     string
		segs     int
		want     int
		wantGot  int
		strategy Strategy
	}{
		{"one of three", 3, 1, 1, StrategyRandom},
		{"three of three", 3, 3, 3, StrategyRandom},
		{"more than segments is best effort", 2, 5, 2, StrategyRandom},
		{"free ratio first", 4, 2, 2, StrategyFreeRatioFirst},
		{"local first", 4, 2, 2, StrategyLocalFirst},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			segs := map[string]uint64{}
			for i := range tc.segs {
				segs[fmt.Sprintf("s%d", i)] = 1 << 20
			}
			m, _ := newTestMaster(t, Config{Strategy: tc.strategy}, segs)
			for i := range 20 {
				reps := mustPut(t, m, fmt.Sprintf("k%d", i), 1000, ReplicateConfig{Replicas: tc.want})
				if len(reps) != tc.wantGot {
					t.Fatalf("got %d replicas, want %d", len(reps), tc.wantGot)
				}
				seen := map[string]bool{}
				for _, r := range reps {
					if seen[r.Segment] {
						t.Fatalf("two replicas on segment %s", r.Segment)
					}
					seen[r.Segment] = true
					if r.Size != 1000 || r.Endpoint != "ep-"+r.Segment {
						t.Fatalf("bad replica %+v", r)
					}
				}
			}
		})
	}
}

func TestAllocationStrategies(t *testing.T) {
	t.Run("preferred segment first", func(t *testing.T) {
		m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20, "c": 1 << 20})
		for i := range 10 {
			reps := mustPut(t, m, fmt.Sprint(i), 100, ReplicateConfig{PreferredSegments: []string{"b"}})
			if reps[0].Segment != "b" {
				t.Fatalf("replica on %s, want preferred b", reps[0].Segment)
			}
		}
	})
	t.Run("local first", func(t *testing.T) {
		m, _ := newTestMaster(t, Config{Strategy: StrategyLocalFirst}, map[string]uint64{"a": 1 << 20, "b": 1 << 20, "c": 1 << 20})
		for i := range 10 {
			reps, err := m.PutStart("client-c", fmt.Sprint(i), 100, ReplicateConfig{})
			if err != nil || reps[0].Segment != "c" {
				t.Fatalf("replica %v err %v, want the caller's segment c", reps, err)
			}
		}
	})
	t.Run("free ratio first", func(t *testing.T) {
		m, _ := newTestMaster(t, Config{Strategy: StrategyFreeRatioFirst}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
		counts := map[string]int{}
		for i := range 100 {
			reps := mustPut(t, m, fmt.Sprint(i), 4096, ReplicateConfig{})
			counts[reps[0].Segment]++
		}
		if counts["a"] != 50 || counts["b"] != 50 {
			t.Fatalf("free-ratio-first did not balance: %v", counts)
		}
	})
	t.Run("random spreads", func(t *testing.T) {
		m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20, "c": 1 << 20})
		counts := map[string]int{}
		for i := range 300 {
			counts[mustPut(t, m, fmt.Sprint(i), 64, ReplicateConfig{})[0].Segment]++
		}
		for _, s := range []string{"a", "b", "c"} {
			if counts[s] < 50 {
				t.Fatalf("random placement skewed: %v", counts)
			}
		}
	})
}

func TestPutLifecycle(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20})
	if _, err := m.PutStart("w", "k", 100, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.Exist("k"); ok {
		t.Fatal("unfinished put visible to Exist")
	}
	if _, err := m.GetReplicaList("k"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("unfinished put visible to Get: %v", err)
	}
	if _, err := m.PutStart("w2", "k", 100, ReplicateConfig{}); !errors.Is(err, ErrObjectExists) {
		t.Fatalf("concurrent put of same key: %v", err)
	}
	if err := m.PutEnd("other", "k", 1); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("PutEnd by another client: %v", err)
	}
	if err := m.PutEnd("w", "k", 7); err != nil {
		t.Fatal(err)
	}
	info, err := m.GetReplicaList("k")
	if err != nil || info.CRC != 7 || info.Size != 100 || len(info.Replicas) != 1 || info.LeaseTTL != 10*time.Second {
		t.Fatalf("info %+v err %v", info, err)
	}
	if _, err := m.PutStart("w", "k", 100, ReplicateConfig{}); !errors.Is(err, ErrObjectExists) {
		t.Fatalf("put of existing key: %v", err)
	}
	if err := m.PutEnd("w", "k", 7); !errors.Is(err, ErrObjectExists) {
		t.Fatalf("second PutEnd: %v", err)
	}
	// Revoke releases the space.
	if _, err := m.PutStart("w", "r", 1000, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	used := m.Stats().Used
	if err := m.PutRevoke("x", "r"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("revoke by other: %v", err)
	}
	if err := m.PutRevoke("w", "r"); err != nil {
		t.Fatal(err)
	}
	if got := m.Stats().Used; got != used-1024 {
		t.Fatalf("used after revoke %d, want %d", got, used-1024)
	}
	if err := m.PutRevoke("w", "k"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("revoke of complete object: %v", err)
	}
}

func TestLeasesAndRemove(t *testing.T) {
	m, clk := newTestMaster(t, Config{LeaseTTL: 10 * time.Second}, map[string]uint64{"a": 1 << 20})
	mustPut(t, m, "k", 100, ReplicateConfig{})
	if err := m.Remove("k", false); err != nil {
		t.Fatalf("remove of unleased: %v", err)
	}
	if err := m.Remove("k", false); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("remove of missing: %v", err)
	}
	mustPut(t, m, "k", 100, ReplicateConfig{})
	if _, err := m.GetReplicaList("k"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("k", false); !errors.Is(err, ErrObjectHasLease) {
		t.Fatalf("remove of leased: %v", err)
	}
	if m.Stats().LeaseRejections != 1 {
		t.Fatal("lease rejection not counted")
	}
	clk.Advance(9 * time.Second)
	if _, err := m.GetReplicaList("k"); err != nil { // renews to t+19
		t.Fatal(err)
	}
	clk.Advance(9 * time.Second)
	if err := m.Remove("k", false); !errors.Is(err, ErrObjectHasLease) {
		t.Fatalf("remove within renewed lease: %v", err)
	}
	clk.Advance(2 * time.Second)
	if err := m.Remove("k", false); err != nil {
		t.Fatalf("remove after lease: %v", err)
	}
	mustPut(t, m, "k", 100, ReplicateConfig{})
	m.GetReplicaList("k")
	if err := m.Remove("k", true); err != nil {
		t.Fatalf("forced remove of leased: %v", err)
	}
	if m.Stats().Used != 0 {
		t.Fatal("space not released")
	}
	// Exist grants no lease.
	mustPut(t, m, "e", 100, ReplicateConfig{})
	if ok, err := m.Exist("e"); !ok || err != nil {
		t.Fatal("exist")
	}
	if err := m.Remove("e", false); err != nil {
		t.Fatalf("remove after exist: %v", err)
	}
	if _, err := m.Exist(""); !errors.Is(err, ErrInvalidParams) {
		t.Fatal("exist of empty key accepted")
	}
}

func TestRemoveByRegexAndAll(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	for _, k := range []string{"user/1", "user/2", "user/3", "sys/1", "sys/2"} {
		mustPut(t, m, k, 100, ReplicateConfig{Replicas: 2})
	}
	m.GetReplicaList("user/3") // leased
	m.PutStart("w", "user/pending", 100, ReplicateConfig{})
	tests := []struct {
		name    string
		pattern string
		force   bool
		want    int
		wantErr error
	}{
		{"bad regex", "(", false, 0, ErrInvalidParams},
		{"no match", "^nothing", false, 0, nil},
		{"leased skipped", "^user/", false, 2, nil},
		{"leased forced", "^user/", true, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := m.RemoveByRegex(tc.pattern, tc.force)
			if n != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("n=%d err=%v, want %d %v", n, err, tc.want, tc.wantErr)
			}
		})
	}
	m.GetReplicaList("sys/1")
	if n := m.RemoveAll(false); n != 1 {
		t.Fatalf("RemoveAll removed %d, want 1 (sys/1 leased)", n)
	}
	if n := m.RemoveAll(true); n != 1 {
		t.Fatalf("forced RemoveAll removed %d, want 1", n)
	}
	st := m.Stats()
	if st.Objects != 0 || st.IncompleteObjects != 1 || st.Used != 2*128/2 {
		t.Fatalf("after RemoveAll: %+v", st)
	}
	if err := m.PutEnd("w", "user/pending", 1); err != nil {
		t.Fatalf("pending put broken by RemoveAll: %v", err)
	}
}

func TestListPagination(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20})
	for i := range 25 {
		mustPut(t, m, fmt.Sprintf("p/%02d", i), 100, ReplicateConfig{})
	}
	mustPut(t, m, "q/0", 100, ReplicateConfig{})
	m.PutStart("w", "p/zz-unfinished", 100, ReplicateConfig{})
	var all []string
	cursor := ""
	pages := 0
	for {
		page, next := m.List("p/", cursor, 10)
		pages++
		for _, k := range page {
			all = append(all, k.Key)
			if k.Size != 100 || k.Replicas != 1 {
				t.Fatalf("bad row %+v", k)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if pages != 3 || len(all) != 25 || all[0] != "p/00" || all[24] != "p/24" {
		t.Fatalf("pages=%d keys=%v", pages, all)
	}
	for i := 1; i < len(all); i++ {
		if all[i] <= all[i-1] {
			t.Fatal("not sorted")
		}
	}
	if page, _ := m.List("", "", 0); len(page) != 26 {
		t.Fatalf("list all: %d", len(page))
	}
}

func TestUpsert(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20})
	first := mustPut(t, m, "k", 1000, ReplicateConfig{})
	// Same size: rewritten in place.
	reps, err := m.Upsert("w2", "k", 1000, ReplicateConfig{})
	if err != nil || reps[0].Addr != first[0].Addr {
		t.Fatalf("same-size upsert: %v %v", reps, err)
	}
	if ok, _ := m.Exist("k"); ok {
		t.Fatal("object visible during upsert")
	}
	if _, err := m.Upsert("w3", "k", 1000, ReplicateConfig{}); !errors.Is(err, ErrObjectExists) {
		t.Fatalf("upsert during upsert: %v", err)
	}
	if err := m.PutEnd("w2", "k", 9); err != nil {
		t.Fatal(err)
	}
	// Different size: new space.
	if _, err := m.Upsert("w", "k", 5000, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	m.PutEnd("w", "k", 10)
	info, _ := m.GetReplicaList("k")
	if info.Size != 5000 || info.CRC != 10 || m.Stats().Used != 5056 {
		t.Fatalf("after resize: %+v used %d", info, m.Stats().Used)
	}
	// Leased (the GetReplicaList above): not refused; the old value's space stays
	// reserved until the lease ends, beside the new value's.
	if _, err := m.Upsert("w", "k", 10, ReplicateConfig{}); err != nil {
		t.Fatalf("upsert of leased: %v", err)
	}
	m.PutEnd("w", "k", 11)
	if info, _ := m.GetReplicaList("k"); info.Size != 10 || info.CRC != 11 {
		t.Fatalf("after upsert of leased: %+v", info)
	}
	if used := m.Stats().Used; used < 5056 {
		t.Fatalf("old value's space released under its lease: used %d", used)
	}
	clk.Advance(11 * time.Second)
	// New key: plain put.
	if _, err := m.Upsert("w", "new", 10, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
}

func TestEvictionAtWatermark(t *testing.T) {
	// 4 segments x 64 KiB; objects of 4 KiB -> 64 objects fill it.
	segs := map[string]uint64{"a": 64 << 10, "b": 64 << 10, "c": 64 << 10, "d": 64 << 10}
	m, clk := newTestMaster(t, Config{HighWatermark: 0.9, EvictionRatio: 0.1, ClientTTL: time.Hour}, segs)
	for i := range 56 { // 56/64 = 0.875: below the watermark
		mustPut(t, m, fmt.Sprintf("k%02d", i), 4096, ReplicateConfig{})
		clk.Advance(time.Second)
	}
	m.Tick()
	if m.Stats().Evictions != 0 {
		t.Fatal("evicted below watermark")
	}
	// Protect the oldest objects in different ways.
	m.GetReplicaList("k00") // leased
	// k01 hard pinned, k02 soft pinned (re-put), k03 unfinished.
	m.Remove("k01", true)
	mustPut(t, m, "k01", 4096, ReplicateConfig{HardPin: true})
	m.Remove("k02", true)
	mustPut(t, m, "k02", 4096, ReplicateConfig{SoftPin: true})
	m.Remove("k03", true)
	m.PutStart("w", "k03", 4096, ReplicateConfig{})
	// Make k01/k02 old again relative to others by touching everything else later.
	clk.Advance(time.Second)
	for i := 4; i < 56; i++ {
		m.Exist(fmt.Sprintf("k%02d", i))
		clk.Advance(time.Millisecond)
	}
	for i := range 3 { // 59/64 = 0.92
		mustPut(t, m, fmt.Sprintf("n%d", i), 4096, ReplicateConfig{})
	}
	m.Tick()
	st := m.Stats()
	// 10% of 256 KiB = 25.6 KiB -> 7 objects of 4 KiB.
	if st.Evictions != 7 || st.EvictionRuns != 1 {
		t.Fatalf("evictions=%d runs=%d", st.Evictions, st.EvictionRuns)
	}
	if st.UtilisationAtFirstEviction < 0.9 {
		t.Fatalf("utilisation at first eviction %.3f", st.UtilisationAtFirstEviction)
	}
	for _, k := range []string{"k00", "k01", "k02"} {
		if ok, _ := m.Exist(k); !ok {
			t.Fatalf("%s (leased/pinned) was evicted", k)
		}
	}
	if err := m.PutEnd("w", "k03", 1); err != nil {
		t.Fatalf("unfinished put evicted: %v", err)
	}
	for i := 4; i < 11; i++ { // the 7 least recently used plain objects
		if ok, _ := m.Exist(fmt.Sprintf("k%02d", i)); ok {
			t.Fatalf("k%02d should have been evicted", i)
		}
	}
	if ok, _ := m.Exist("k11"); !ok {
		t.Fatal("k11 evicted: not LRU order")
	}
}

func TestSoftPinEvictedLastAndExpires(t *testing.T) {
	m, clk := newTestMaster(t, Config{EvictionRatio: 0.5, SoftPinTTL: time.Minute}, map[string]uint64{"a": 8 * 4096})
	mustPut(t, m, "pinned", 4096, ReplicateConfig{SoftPin: true})
	clk.Advance(time.Second)
	for i := range 3 {
		mustPut(t, m, fmt.Sprint(i), 4096, ReplicateConfig{})
	}
	// Evicting half the capacity (4 objects) must take the 3 plain ones and
	// only then the pinned one.
	if freed := m.Evict(); freed != 4*4096 {
		t.Fatalf("freed %d", freed)
	}
	if ok, _ := m.Exist("pinned"); ok {
		t.Fatal("pinned object survived though nothing else was left")
	}
	mustPut(t, m, "pinned", 4096, ReplicateConfig{SoftPin: true})
	mustPut(t, m, "plain", 4096, ReplicateConfig{})
	clk.Advance(time.Second)
	m.Exist("pinned") // pinned is now the most recent
	m.cfg.EvictionRatio = 0.1
	m.Evict() // frees 1 object: plain, not the pinned one
	if ok, _ := m.Exist("pinned"); !ok {
		t.Fatal("soft-pinned evicted before plain")
	}
	// After the TTL the pin is gone and LRU order rules.
	mustPut(t, m, "plain2", 4096, ReplicateConfig{})
	clk.Advance(2 * time.Minute)
	m.Exist("plain2")
	m.Evict()
	if ok, _ := m.Exist("pinned"); ok {
		t.Fatal("expired soft pin still protected the object")
	}
}

func TestPutNoSpaceEvictsSynchronously(t *testing.T) {
	m, clk := newTestMaster(t, Config{EvictionRatio: 0.25}, map[string]uint64{"a": 4 * 4096})
	for i := range 4 {
		mustPut(t, m, fmt.Sprint(i), 4096, ReplicateConfig{})
		clk.Advance(time.Second)
	}
	if _, err := m.PutStart("w", "new", 4096, ReplicateConfig{}); err != nil {
		t.Fatalf("put into a full store did not evict: %v", err)
	}
	if ok, _ := m.Exist("0"); ok {
		t.Fatal("LRU object 0 not evicted")
	}
	// Everything leased: no space, clear error.
	for _, k := range []string{"1", "2", "3"} {
		m.GetReplicaList(k)
	}
	m.PutEnd("w", "new", 0)
	m.GetReplicaList("new")
	if _, err := m.PutStart("w", "x", 4096, ReplicateConfig{}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put with all leased: %v", err)
	}
}

func TestPutTimeoutCleanup(t *testing.T) {
	cfg := Config{PutTimeout: 30 * time.Second, PutReleaseTimeout: 10 * time.Minute, ClientTTL: time.Hour}
	m, clk := newTestMaster(t, cfg, map[string]uint64{"a": 1 << 20})
	m.Ping("w")
	m.RemountSegments("w", nil) // w is a live client
	if _, err := m.PutStart("w", "k", 4096, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(29 * time.Second)
	if _, err := m.PutStart("w2", "k", 4096, ReplicateConfig{}); !errors.Is(err, ErrObjectExists) {
		t.Fatalf("preempted too early: %v", err)
	}
	clk.Advance(2 * time.Second)
	m.Tick() // owner alive: kept (it may still finish)
	if m.Stats().IncompleteObjects != 1 {
		t.Fatal("live owner's put cleaned before release timeout")
	}
	// A new put preempts the zombie; its space stays reserved.
	if _, err := m.PutStart("w2", "k", 4096, ReplicateConfig{}); err != nil {
		t.Fatalf("zombie not preempted: %v", err)
	}
	if err := m.PutEnd("w", "k", 1); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("zombie PutEnd: %v", err)
	}
	if used := m.Stats().Used; used != 2*4096 {
		t.Fatalf("zombie space released early: used %d", used)
	}
	if err := m.PutEnd("w2", "k", 2); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute)
	m.Tick()
	if used := m.Stats().Used; used != 4096 {
		t.Fatalf("zombie space not released: used %d", used)
	}
	// Put of a client that disappears: freed once its owner is gone.
	m.PutStart("ghost", "g", 4096, ReplicateConfig{})
	clk.Advance(31 * time.Second)
	m.Tick()
	if _, err := m.Query("g"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatal("ownerless unfinished put not cleaned up")
	}
	if m.Stats().PutsTimedOut != 2 {
		t.Fatalf("timed out count %d", m.Stats().PutsTimedOut)
	}
}

func TestClientTTLDropUnmountsSegments(t *testing.T) {
	m, clk := newTestMaster(t, Config{ClientTTL: 10 * time.Second}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	for i := range 10 {
		mustPut(t, m, fmt.Sprint(i), 100, ReplicateConfig{Replicas: 2})
	}
	mustPut(t, m, "only-a", 100, ReplicateConfig{PreferredSegments: []string{"a"}})
	clk.Advance(6 * time.Second)
	if _, st := m.Ping("client-a"); st != PingOK {
		t.Fatal("ping of known client")
	}
	clk.Advance(6 * time.Second)
	m.Tick() // client-b silent for 12s: dropped
	st := m.Stats()
	if st.Segments != 1 || st.ClientsDropped != 1 {
		t.Fatalf("segments=%d dropped=%d", st.Segments, st.ClientsDropped)
	}
	for i := range 10 {
		info, err := m.GetReplicaList(fmt.Sprint(i))
		if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Segment != "a" {
			t.Fatalf("object %d: %+v %v", i, info, err)
		}
	}
	if ok, _ := m.Exist("only-a"); !ok {
		t.Fatal("object on the live segment lost")
	}
	// Drop a: objects with no replica left disappear.
	clk.Advance(11 * time.Second)
	m.Tick()
	if st := m.Stats(); st.Objects != 0 || st.Segments != 0 {
		t.Fatalf("after both dropped: %+v", st)
	}
	if _, s := m.Ping("client-a"); s != PingNeedRemount {
		t.Fatal("dropped client not told to remount")
	}
}

func TestNeedRemountAfterRestart(t *testing.T) {
	m1, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20})
	spec, _ := m1.Segment("a")
	mustPut(t, m1, "k", 100, ReplicateConfig{})
	// A new master (restart) knows nothing.
	m2, _ := New(Config{}, newFakeClock())
	if _, st := m2.Ping("client-a"); st != PingNeedRemount {
		t.Fatal("unknown client not told to remount")
	}
	if err := m2.RemountSegments("client-a", []SegmentSpec{spec.SegmentSpec}); err != nil {
		t.Fatal(err)
	}
	if err := m2.RemountSegments("client-a", []SegmentSpec{spec.SegmentSpec}); err != nil {
		t.Fatalf("remount not idempotent: %v", err)
	}
	if _, st := m2.Ping("client-a"); st != PingOK {
		t.Fatal("remounted client still told to remount")
	}
	// No stale object after restart.
	if _, err := m2.GetReplicaList("k"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("stale object after restart: %v", err)
	}
	if m2.Stats().Segments != 1 {
		t.Fatal("segment not remounted")
	}
}

func TestMountUnmount(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20})
	spec := SegmentSpec{Name: "x", Endpoint: "e", Base: 4096, Size: 1 << 20}
	tests := []struct {
		name   string
		client string
		spec   SegmentSpec
		want   error
	}{
		{"no name", "c", SegmentSpec{Endpoint: "e", Size: 1}, ErrInvalidParams},
		{"no size", "c", SegmentSpec{Name: "y", Endpoint: "e"}, ErrInvalidParams},
		{"too small", "c", SegmentSpec{Name: "y", Endpoint: "e", Size: 8}, ErrInvalidParams},
		{"ok", "c", spec, nil},
		{"idempotent", "c", spec, nil},
		{"name taken by the same client", "c", SegmentSpec{Name: "x", Endpoint: "other-endpoint", Base: 4096, Size: 1 << 20}, ErrSegmentExists},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := m.MountSegment(tc.client, tc.spec); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err=%v want %v", err, tc.want)
			}
		})
	}
	mustPut(t, m, "k", 100, ReplicateConfig{PreferredSegments: []string{"x"}})
	if err := m.UnmountSegment("other", "x"); !errors.Is(err, ErrNotOwner) {
		t.Fatal(err)
	}
	if err := m.UnmountSegment("c", "nope"); !errors.Is(err, ErrSegmentNotFound) {
		t.Fatal(err)
	}
	if err := m.UnmountSegment("c", "x"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.Exist("k"); ok {
		t.Fatal("object whose only replica was unmounted still exists")
	}
	// Graceful: waits for the lease, refuses new allocations meanwhile.
	m.MountSegment("c", spec)
	mustPut(t, m, "g", 100, ReplicateConfig{PreferredSegments: []string{"x"}})
	m.GetReplicaList("g")
	if err := m.GracefulUnmount("c", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	reps := mustPut(t, m, "h", 100, ReplicateConfig{PreferredSegments: []string{"x"}})
	if reps[0].Segment == "x" {
		t.Fatal("allocated on a draining segment")
	}
	m.Tick()
	if _, err := m.Segment("x"); err != nil {
		t.Fatal("draining segment unmounted while leased")
	}
	clk.Advance(11 * time.Second)
	m.Tick()
	if _, err := m.Segment("x"); !errors.Is(err, ErrSegmentNotFound) {
		t.Fatal("drained segment still mounted")
	}
}

func TestErrorCodes(t *testing.T) {
	for _, e := range []error{ErrObjectNotFound, ErrObjectExists, ErrObjectHasLease, ErrNoSpace, ErrInvalidParams, ErrSegmentNotFound, ErrLeaseExpired} {
		wrapped := fmt.Errorf("ctx: %w", e)
		if got := ErrorOf(Code(wrapped)); got != e {
			t.Fatalf("round trip of %v gave %v", e, got)
		}
	}
	if Code(nil) != 0 || ErrorOf(0) != nil || Code(errors.New("x")) != CodeInternal {
		t.Fatal("nil/unknown mapping")
	}
	if Code(ErrObjectNotFound) != -704 || Code(ErrObjectHasLease) != -706 {
		t.Fatal("Mooncake codes changed")
	}
}

// TestConcurrentOps runs puts, gets, removes and RemoveAll from several
// goroutines; the race detector and the final accounting check the core.
func TestConcurrentOps(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := fmt.Sprintf("g%d-%d", g, i%20)
				if _, err := m.PutStart("w", k, 512, ReplicateConfig{Replicas: 2}); err == nil {
					m.PutEnd("w", k, 1)
				}
				m.GetReplicaList(k)
				if i%50 == 0 {
					m.RemoveAll(true)
				}
				m.Tick()
			}
		}()
	}
	wg.Wait()
	m.RemoveAll(true)
	if st := m.Stats(); st.Used != 0 || st.Objects != 0 {
		t.Fatalf("leak: %+v", st)
	}
}

// TestListCursorConsistency: a listing walks the live index from its
// cursor: a key removed mid-listing is never shown, one added after the
// cursor is, one added before it is not.
func TestListCursorConsistency(t *testing.T) {
	m, _ := newTestMaster(t, Config{ClientTTL: time.Hour}, map[string]uint64{"a": 1 << 20})
	for i := range 10 {
		mustPut(t, m, fmt.Sprintf("k%d", i), 64, ReplicateConfig{})
	}
	page, next := m.List("k", "", 3) // k0 k1 k2
	if len(page) != 3 || next != "k2" {
		t.Fatalf("page 1: %v %q", page, next)
	}
	m.Remove("k3", false)                       // removed mid-listing: never shown
	mustPut(t, m, "k35", 64, ReplicateConfig{}) // added after the cursor: shown
	mustPut(t, m, "k05", 64, ReplicateConfig{}) // added before the cursor: not in this listing
	page, next = m.List("k", next, 3)
	if len(page) != 3 || page[0].Key != "k35" || page[1].Key != "k4" || next != "k5" {
		t.Fatalf("page 2 after a remove and two puts: %v %q", page, next)
	}
	page, next = m.List("k", next, 10)
	if len(page) != 4 || page[0].Key != "k6" || next != "" {
		t.Fatalf("last page: %v %q", page, next)
	}
	if page, next := m.List("x", "", 10); len(page) != 0 || next != "" {
		t.Fatalf("empty prefix: %v %q", page, next)
	}
}

func TestFruitlessEvictionBacksOff(t *testing.T) {
	m, clk := newTestMaster(t, Config{ClientTTL: time.Hour}, map[string]uint64{"a": 4 * 4096})
	for i := range 4 {
		mustPut(t, m, fmt.Sprint(i), 4096, ReplicateConfig{HardPin: true})
	}
	m.Tick()
	m.Tick()
	if runs := m.Stats().EvictionRuns; runs != 1 {
		t.Fatalf("eviction runs %d: a fruitless eviction was retried at once", runs)
	}
	clk.Advance(2 * time.Second)
	m.Tick()
	if runs := m.Stats().EvictionRuns; runs != 2 {
		t.Fatalf("eviction runs %d after the back-off", runs)
	}
}

// TestRestartedNodeReplacesStaleSegment: a node restarted on the same
// endpoint before its TTL ran out mounts at once; the stale replicas go.
func TestRestartedNodeReplacesStaleSegment(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{})
	spec := SegmentSpec{Name: "127.0.0.1:7000", Endpoint: "127.0.0.1:7000", Base: 1 << 20, Size: 1 << 20}
	if err := m.MountSegment("old-process", spec); err != nil {
		t.Fatal(err)
	}
	mustPut(t, m, "k", 100, ReplicateConfig{})
	spec.Base = 8 << 20 // new process, new memory
	if err := m.MountSegment("new-process", spec); err != nil {
		t.Fatalf("restarted node refused: %v", err)
	}
	if ok, _ := m.Exist("k"); ok {
		t.Fatal("replica in the old process's memory still listed")
	}
	si, _ := m.Segment(spec.Name)
	if si.Client != "new-process" || si.Base != 8<<20 || si.Used != 0 {
		t.Fatalf("segment after remount: %+v", si)
	}
}

// A forced remove of a put in progress keeps its space reserved until the
// put's release timeout: its writer may still be writing there, so the bytes
// must not go to another object first.
func TestForcedRemoveOfUnfinishedPutReservesSpace(t *testing.T) {
	cfg := Config{PutTimeout: 30 * time.Second, PutReleaseTimeout: 10 * time.Minute, ClientTTL: time.Hour}
	m, clk := newTestMaster(t, cfg, map[string]uint64{"a": 2 * 4096})
	m.Ping("w")
	m.RemountSegments("w", nil)
	first, err := m.PutStart("w", "k", 4096, ReplicateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("k", true); err != nil {
		t.Fatalf("forced remove of a put in progress: %v", err)
	}
	if err := m.PutEnd("w", "k", 1); err == nil {
		t.Fatal("the removed put completed")
	}
	if used := m.Stats().Used; used != 4096 {
		t.Fatalf("space of the removed put released at once: used %d", used)
	}
	second, err := m.PutStart("w2", "other", 4096, ReplicateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if first[0].Addr == second[0].Addr {
		t.Fatal("a new put got the bytes the removed put's writer may still write")
	}
	if err := m.PutEnd("w2", "other", 2); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute)
	m.Tick()
	if used := m.Stats().Used; used != 4096 {
		t.Fatalf("reserved space not released after the release timeout: used %d", used)
	}
}
