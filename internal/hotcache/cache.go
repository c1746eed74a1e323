package hotcache

import (
	"errors"
	"fmt"
	"sync"
)

// Defaults of Config (Mooncake's: MC_STORE_LOCAL_HOT_BLOCK_SIZE 16 MiB,
// MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD 2, a 4096-wide sketch).
const (
	DefaultMaxEntry    = 16 << 20
	DefaultThreshold   = 2
	DefaultSketchWidth = 4096
)

// ErrInvalid is returned by New for a configuration it cannot use.
var ErrInvalid = errors.New("invalid hot cache config")

// Config sizes a Cache.
type Config struct {
	Capacity    uint64 // bytes of values held (required, > 0)
	MaxEntry    uint64 // largest value admitted (0 = DefaultMaxEntry; at most Capacity)
	Threshold   int    // estimated accesses a key needs to be admitted (0 = DefaultThreshold; 1..255)
	SketchWidth int    // counters a sketch row (0 = DefaultSketchWidth; rounded up to a power of two)
}

func (c Config) withDefaults() Config {
	if c.MaxEntry == 0 {
		c.MaxEntry = DefaultMaxEntry
	}
	c.MaxEntry = min(c.MaxEntry, c.Capacity)
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.SketchWidth == 0 {
		c.SketchWidth = DefaultSketchWidth
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Capacity == 0:
		return fmt.Errorf("hotcache: %w: capacity 0", ErrInvalid)
	case c.Threshold < 0 || c.Threshold > 255:
		return fmt.Errorf("hotcache: %w: threshold %d (1..255)", ErrInvalid, c.Threshold)
	case c.SketchWidth < 0 || c.SketchWidth > 1<<24:
		return fmt.Errorf("hotcache: %w: sketch width %d", ErrInvalid, c.SketchWidth)
	}
	return nil
}

// Version names the version of a value an entry holds: the master's
// incarnation (View), the put's sequence number (Seq) and the value's
// CRC32C. Two values with the same Version are the same bytes.
type Version struct {
	View, Seq uint64
	CRC       uint32
}

// Entry is a value held by the cache. Value is never written after Offer:
// readers copy from it without the cache's lock.
type Entry struct {
	Version
	Value []byte
}

// Stats are the cache's counters and gauges, kept as things change.
type Stats struct {
	Entries     int    // values held
	Bytes       uint64 // bytes of the values held
	Capacity    uint64 // Config.Capacity
	Admitted    uint64 // values taken in
	Rejected    uint64 // values offered and refused (too rare, too large, or no more frequent than what they would evict)
	Evicted     uint64 // values dropped to make room
	Invalidated uint64 // values dropped by Remove, RemoveIf and Clear, or replaced by a newer version
}

// node is an entry in the recency list (most recent at head.next).
type node struct {
	key        string
	e          Entry
	prev, next *node
}

// Cache is a byte-bounded, frequency-admitted LRU of values. Safe for
// concurrent use.
type Cache struct {
	cfg Config

	mu    sync.Mutex
	items map[string]*node
	head  node // sentinel: head.next is the most recent, head.prev the least
	bytes uint64
	sk    *sketch
	st    Stats
}

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Cache{cfg: cfg, items: map[string]*node{}, sk: newSketch(cfg.SketchWidth)}
	c.head.prev, c.head.next = &c.head, &c.head
	c.st.Capacity = cfg.Capacity
	return c, nil
}

// Config is the effective configuration.
func (c *Cache) Config() Config { return c.cfg }

// Lookup records one access of key and returns the entry held for it, if
// any, making it the most recent. The caller serves it only once the
// entry's Version is proven current.
func (c *Cache) Lookup(key string) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sk.add(c.sk.hash(key))
	n := c.items[key]
	if n == nil {
		return Entry{}, false
	}
	c.unlink(n)
	c.pushFront(n)
	return n.e, true
}

// Wants reports whether a value of size bytes for key would be admitted
// now (its key is frequent enough and the value not too large), so a caller
// copies the value only when it will likely be kept. Offer decides.
func (c *Cache) Wants(key string, size int) bool {
	if uint64(size) > c.cfg.MaxEntry || size == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sk.estimate(c.sk.hash(key)) >= c.cfg.Threshold
}

// Offer takes e for key when key is frequent enough and every value it
// would evict is less frequent (TinyLFU: a tie keeps the value held, so
// equally popular keys do not churn); it reports whether e was kept. The cache owns e.Value
// from then on (it is never written again). An entry of the same view and
// a newer sequence number is kept over e.
func (c *Cache) Offer(key string, e Entry) bool {
	size := uint64(len(e.Value))
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.sk.hash(key)
	est := c.sk.estimate(h)
	if size == 0 || size > c.cfg.MaxEntry || est < c.cfg.Threshold {
		c.st.Rejected++
		return false
	}
	if old := c.items[key]; old != nil {
		if old.e.View == e.View && old.e.Seq >= e.Seq {
			c.st.Rejected++
			return false
		}
		c.drop(old)
		c.st.Invalidated++
	}
	// The victims, least recent first, until e fits; each must be colder.
	need := int64(c.bytes+size) - int64(c.cfg.Capacity)
	var victims []*node
	for v := c.head.prev; need > 0 && v != &c.head; v = v.prev {
		if c.sk.estimate(c.sk.hash(v.key)) >= est {
			c.st.Rejected++
			return false
		}
		victims = append(victims, v)
		need -= int64(len(v.e.Value))
	}
	for _, v := range victims {
		c.drop(v)
		c.st.Evicted++
	}
	n := &node{key: key, e: e}
	c.items[key] = n
	c.pushFront(n)
	c.bytes += size
	c.st.Admitted++
	return true
}

// Remove drops key's entry, if any, and reports whether there was one.
func (c *Cache) Remove(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.items[key]
	if n == nil {
		return false
	}
	c.drop(n)
	c.st.Invalidated++
	return true
}

// RemoveVersion drops key's entry only if it holds version v (a reader
// that found v stale leaves a newer entry another reader put meanwhile),
// and reports whether it did.
func (c *Cache) RemoveVersion(key string, v Version) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.items[key]
	if n == nil || n.e.Version != v {
		return false
	}
	c.drop(n)
	c.st.Invalidated++
	return true
}

// RemoveIf drops the entries whose key match reports true and returns how
// many it dropped (one pass over the entries held, bounded by Capacity).
func (c *Cache) RemoveIf(match func(key string) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.items {
		if match(k) {
			c.drop(v)
			n++
		}
	}
	c.st.Invalidated += uint64(n)
	return n
}

// Clear drops every entry.
func (c *Cache) Clear() int {
	return c.RemoveIf(func(string) bool { return true })
}

// Estimate is key's estimated access count (tests, diagnostics).
func (c *Cache) Estimate(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sk.estimate(c.sk.hash(key))
}

// Stats returns the counters and gauges.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	st.Entries, st.Bytes = len(c.items), c.bytes
	return st
}

func (c *Cache) drop(n *node) {
	c.unlink(n)
	delete(c.items, n.key)
	c.bytes -= uint64(len(n.e.Value))
}

func (c *Cache) unlink(n *node) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

func (c *Cache) pushFront(n *node) {
	n.prev, n.next = &c.head, c.head.next
	c.head.next.prev = n
	c.head.next = n
}
