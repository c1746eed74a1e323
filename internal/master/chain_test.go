package master

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/evict"
)

const testCompat = "0123456789abcdef0123456789abcdef"

// blockKey is a key of the store connector's scheme: block i of chain c
// (one hex digit).
func blockKey(c string, i int) string { return fmt.Sprintf("kv/%s/%s%063x", testCompat, c, i) }

func TestChainOf(t *testing.T) {
	k := blockKey("a", 3)
	if chain, ok := ChainOf(k); !ok || chain != "kv/"+testCompat+"/" {
		t.Fatalf("ChainOf(%q) = %q, %v", k, chain, ok)
	}
	if chain, ok := ChainOf(testCompat + "/" + strings.Repeat("f", 64)); !ok || chain != testCompat+"/" {
		t.Fatalf("key without a prefix: %q, %v", chain, ok)
	}
	for _, bad := range []string{
		"", "plain/key", strings.Repeat("a", 97),
		"kv/" + testCompat + "/" + strings.Repeat("A", 64), // upper case
		"kv/" + testCompat + "/" + strings.Repeat("a", 63), // short hash
		"kv/" + testCompat + "x" + strings.Repeat("a", 64), // no slash
		"kv/" + testCompat[:31] + "g/" + strings.Repeat("a", 64),
	} {
		if _, ok := ChainOf(bad); ok {
			t.Errorf("ChainOf(%q) accepted", bad)
		}
	}
}

// survivors lists which of keys still exist.
func survivors(m *Master, keys []string) []string {
	var out []string
	for _, k := range keys {
		if ok, _ := m.Exist(k); ok {
			out = append(out, k)
		}
	}
	return out
}

// Two chains of 6 blocks, each put as one batch, then two plain objects;
// one eviction takes 3 objects. TailFirst takes the older chain's 3 deepest
// blocks, keeping a usable prefix; LRU takes its 3 first (by key: here
// the head), leaving a tail no prefix lookup can reach.
func TestEvictionPolicyChains(t *testing.T) {
	for _, tc := range []struct {
		policy evict.Kind
		keepA  []int // blocks of the older chain left
	}{
		{evict.KindTailFirst, []int{0, 1, 2}},
		{evict.KindRetention, []int{0, 1, 2}}, // no turns across eviction runs: TailFirst's order
		{evict.KindLRU, []int{3, 4, 5}},
		{"", []int{3, 4, 5}}, // the default is LRU
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			m, clk := newTestMaster(t, Config{EvictionPolicy: tc.policy, EvictionRatio: 0.18, ClientTTL: time.Hour},
				map[string]uint64{"a": 64 << 10})
			var a, b []string
			for i := range 6 {
				a, b = append(a, blockKey("a", i)), append(b, blockKey("b", i))
			}
			for _, chain := range [][]string{a, b} {
				for _, k := range chain {
					mustPut(t, m, k, 4096, ReplicateConfig{})
					clk.Advance(time.Millisecond)
				}
				m.TouchChains(chain) // the batch put's end
				clk.Advance(time.Second)
			}
			for _, k := range []string{"p0", "p1"} {
				mustPut(t, m, k, 4096, ReplicateConfig{})
				clk.Advance(time.Second)
			}
			if freed := m.Evict(); freed != 3*4096 {
				t.Fatalf("freed %d bytes, want 3 objects", freed)
			}
			var want []string
			for _, i := range tc.keepA {
				want = append(want, a[i])
			}
			if got := survivors(m, a); !slices.Equal(got, want) {
				t.Fatalf("chain a kept %v, want %v", got, want)
			}
			if got := survivors(m, append(b, "p0", "p1")); len(got) != 8 {
				t.Fatalf("newer objects evicted: kept %v", got)
			}
		})
	}
}

// Keys outside the connector's scheme carry no chain: TailFirst evicts
// them in LRU order, as LRU does; a chain touched again by a lookup
// (BatchExist) becomes the most recent group.
func TestTailFirstPlainKeysAndLookups(t *testing.T) {
	orders := map[evict.Kind][]string{}
	for _, policy := range []evict.Kind{evict.KindLRU, evict.KindTailFirst} {
		m, clk := newTestMaster(t, Config{EvictionPolicy: policy, EvictionRatio: 0.18, ClientTTL: time.Hour},
			map[string]uint64{"a": 64 << 10})
		var keys []string
		for i := range 10 {
			k := fmt.Sprintf("k%02d", (i*7)%10)
			keys = append(keys, k)
			mustPut(t, m, k, 4096, ReplicateConfig{})
			clk.Advance(time.Second)
		}
		m.TouchChains(keys) // not block keys: no effect
		m.Evict()
		var gone []string
		for _, k := range keys {
			if ok, _ := m.Exist(k); !ok {
				gone = append(gone, k)
			}
		}
		orders[policy] = gone
	}
	if want := []string{"k00", "k07", "k04"}; !slices.Equal(orders[evict.KindLRU], want) || !slices.Equal(orders[evict.KindTailFirst], want) {
		t.Fatalf("evicted lru %v, tail-first %v, want both %v", orders[evict.KindLRU], orders[evict.KindTailFirst], want)
	}

	m, clk := newTestMaster(t, Config{EvictionPolicy: evict.KindTailFirst, EvictionRatio: 0.18, ClientTTL: time.Hour},
		map[string]uint64{"a": 64 << 10})
	var a, b []string
	for i := range 4 {
		a, b = append(a, blockKey("a", i)), append(b, blockKey("b", i))
	}
	for _, chain := range [][]string{a, b} {
		for _, k := range chain {
			mustPut(t, m, k, 4096, ReplicateConfig{})
		}
		m.TouchChains(chain)
		clk.Advance(time.Second)
	}
	m.BatchExist(a[:2]) // a prefix lookup of chain a: its head is now the newest group
	clk.Advance(time.Second)
	m.Evict()
	// Oldest group: a's unlooked-up tail (deepest first), then b's tail.
	if got, want := survivors(m, append(slices.Clone(a), b...)), []string{a[0], a[1], b[0], b[1], b[2]}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
}

func TestEvictionPolicyConfig(t *testing.T) {
	if err := (Config{EvictionPolicy: "mru"}).Validate(); err == nil {
		t.Fatal("unknown eviction policy accepted")
	}
	if got := (Config{}).withDefaults().EvictionPolicy; got != evict.KindLRU {
		t.Fatalf("default eviction policy %q", got)
	}
}
