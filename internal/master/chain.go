package master

import (
	"math"
	"time"
)

// Chains of KV blocks. The store connector (internal/storeconnector.Key)
// names a block PREFIX + compat hash (32 hex digits) + "/" + block hash
// (64 hex digits), and a block hash covers the block's parent: a block is
// useful only while the blocks before it in its prompt are stored. The
// connector saves and loads a request's blocks with one batch call, in
// prompt order, so the position of a block key in a batch is its depth in
// the chain. The TailFirst eviction policy uses it to evict a chain from its
// tail; keys of any other shape carry no chain and are evicted in LRU order.

// ChainOf reports whether key is a block key of the store connector's
// scheme and returns its chain: the key without the block hash.
func ChainOf(key string) (chain string, ok bool) {
	const blockHex, compatHex = 64, 32
	n := len(key)
	if n < compatHex+1+blockHex || key[n-blockHex-1] != '/' || !lowerHex(key[n-blockHex:]) ||
		!lowerHex(key[n-blockHex-1-compatHex:n-blockHex-1]) {
		return "", false
	}
	return key[:n-blockHex], true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// TouchChains records that keys were used together by one batch call (a
// batch put's end, a batch get): their block keys become one recency group,
// each with its depth in its chain (its position among the batch's keys of
// the same chain). Other keys and objects not complete are left as they are.
func (m *Master) TouchChains(keys []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touchChainsLocked(keys, m.clock.Now())
}

func (m *Master) touchChainsLocked(keys []string, now time.Time) {
	var depth map[string]int
	for _, k := range keys {
		chain, ok := ChainOf(k)
		if !ok {
			continue
		}
		o := m.objects.get(k)
		if o == nil || !o.complete {
			continue
		}
		if depth == nil {
			depth = map[string]int{}
		}
		o.touch(now)
		o.chained, o.depth = true, uint16(min(depth[chain], math.MaxUint16))
		depth[chain]++
	}
}

// chainDepth is the object's depth in its chain as of its last access (0
// when that access was not a chain's batch).
func (o *object) chainDepth() int {
	if o.chained {
		return int(o.depth)
	}
	return 0
}
