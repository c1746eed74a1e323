package master

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/offsetalloc"
)

// SegmentSpec describes a memory segment a client contributes.
type SegmentSpec struct {
	Name     string // unique name of the segment
	Endpoint string // transfer engine segment name of the owner ("host:port")
	Base     uint64 // virtual address of the first byte in the owner's memory
	Size     uint64 // length in bytes
	// Disk tier of the owning node (Mooncake's root_fs_dir), "" = none:
	// the base URL disk copies are read from, and its policies.
	DiskURL        string
	OffloadOnEvict bool // memory evictions of durable objects go to disk
	PromotionOnHit bool // a read from disk puts the value back into memory
}

// ReplicateConfig is the per-put replication policy.
type ReplicateConfig struct {
	Replicas          int           // wanted replicas on distinct segments (0 = 1); best effort
	PreferredSegments []string      // segments tried first, in order
	SoftPin           bool          // evicted only after every unpinned object
	SoftPinTTL        time.Duration // soft pin duration (0 = Config.SoftPinTTL)
	HardPin           bool          // never evicted
	PromoteSeq        uint64        // promotion of the disk copy of this version: refused once it is gone
	KeepSoftPin       bool          // PRESERVE: an upsert keeps the key's soft pin (softpin.go)
}

// Replica is where one copy of an object lives.
type Replica struct {
	Segment  string // segment name
	Endpoint string // transfer engine segment name holding the memory
	Addr     uint64 // remote virtual address of the first byte
	Size     uint64 // object size
	// Durable objects: the header (objheader) lies at Addr-HeaderLen and
	// carries Seq, the put's sequence number.
	HeaderLen uint64
	Seq       uint64
}

// ObjectInfo is the master's view of one object.
type ObjectInfo struct {
	Key          string
	Size         uint64
	CRC          uint32 // CRC32C of the value, set by PutEnd
	Complete     bool
	Replicas     []Replica
	LeaseTTL     time.Duration // lease granted by this call (GetReplicaList only)
	Created      time.Time
	LastAccess   time.Time
	LeaseUntil   time.Time
	SoftPinUntil time.Time
	HardPin      bool
	Disk         []DiskCopy // copies on a node's disk tier (when not in memory)
	Promote      bool       // the reader should put the value back into memory (promotion on hit)
	// The version of the value: this master's incarnation (View) and the
	// put's sequence number (Seq). GetReplicaListIf answers Unchanged
	// when the caller's cached version is still current (cached.go).
	View, Seq uint64
	Unchanged bool
}

// DiskCopy is an object's copy on a storage node's disk tier.
type DiskCopy struct {
	Segment  string
	URL      string // GET URL/disk/object?key=K&seq=Seq
	Seq      uint64
	Endpoint string // the node's transfer engine
	Addr     uint64 // the value's address there (its disk tier's range); 0 = HTTP only
}

// PingStatus is the answer to a client's Ping.
type PingStatus int

// Ping answers.
const (
	PingOK          PingStatus = iota
	PingNeedRemount            // the master does not know the client (it restarted): remount
)

// SegmentInfo is the master's view of a mounted segment.
type SegmentInfo struct {
	SegmentSpec
	Client   string
	Used     uint64
	Capacity uint64
	Objects  int
	Draining bool
}

// Stats are the master's counters and gauges.
type Stats struct {
	Objects, IncompleteObjects       int    // IncompleteObjects: puts in progress, not counting put slots
	PutSlots                         int    // space reserved for clients' next small puts (slot.go)
	Capacity, Used                   uint64 // Used: allocated, less Scrubbing
	Scrubbing                        uint64 // freed bytes waiting for their node to zero them (Config.Scrub)
	ScrubHeld                        uint64 // of those, the bytes a put's write grant may still cover (named for zeroing when it ends)
	Segments, Clients                int
	PutStarts, Puts, PutRevokes      uint64
	Gets, GetMisses                  uint64
	Removes, Evictions, EvictedBytes uint64
	EvictionRuns, LeaseRejections    uint64
	ClientsDropped, PutsTimedOut     uint64
	UtilisationAtFirstEviction       float64 // used/capacity when the first eviction ran (0 = none yet)
	DiskObjects                      int     // keys held only on a disk tier
	DiskGets                         uint64  // reads answered with a disk copy
	CachedGets                       uint64  // reads that confirmed a client's cached version (GetReplicaListIf)
	SlotsReused                      uint64  // put slots made of the version a commit replaced (slot.go)
	ViewVersion                      uint64
}

// replica is where one copy of an object lies: a range of a mounted segment,
// named by the segment's ID (Master.segTab) so that a record holds no
// pointer.
type replica struct {
	off uint64
	seg uint32 // segment ID
	at  uint32 // index of the object in the segment's list (segobjects.go)
}

// place is a range of a segment a replica is being placed in (placement,
// copy tasks' targets).
type place struct {
	seg *segment
	off uint64
}

// object is an object's record, stored by value in the object table
// (objtab.go) and holding no pointer: its key lies in the table's arena,
// its first replica here and the others in the table's side list.
type object struct {
	size uint64
	seq  uint64 // put sequence number (durable objects)
	// Times as Unix nanoseconds (8 bytes each where a time.Time takes 24).
	created, lastAccess, leaseUntil, softPinUntil nanotime

	r0 [1]replica // the first replica (objTable.reps)

	key      keyLoc // where the key lies in the table's arena
	id       uint32 // the record's ID
	owner    uint32 // client that put it, interned (objTable.owner; 0: restored)
	crc      uint32 // CRC32C of the value, set by PutEnd
	hdr      uint32 // header length in front of the value (0 = not durable); Config.Validate caps MaxKeyLen
	depth    uint16 // position in its block chain at its last access (capped), valid while chained
	nrep     uint8  // replicas
	complete bool
	hardPin  bool
	restored bool // re-reported by a node, not put on this master
	chained  bool // the last access was a chain's batch (TouchChains): depth is valid
}

// keyLoc is where a key lies in the object table's arena: its chunk (23
// bits), its offset in the chunk (20) and its length (21; Config.MaxKeyLen
// is at most arenaChunk).
type keyLoc uint64

func makeKeyLoc(chunk, off, n int) keyLoc {
	return keyLoc(uint64(chunk)<<41 | uint64(off)<<21 | uint64(n))
}

func (k keyLoc) chunk() int { return int(k >> 41) }
func (k keyLoc) off() int   { return int(k>>21) & (1<<20 - 1) }
func (k keyLoc) len() int   { return int(k) & (1<<21 - 1) }

// The record's layout is what the master's memory per object is made of:
// 96 bytes with the fields above in this order; memory_test.go measures the
// whole per object. Keep the fixed-size fields together and mind the padding
// when adding one.

// nanotime is a point in time as Unix nanoseconds (years 1678 to 2262), 0
// for none.
type nanotime int64

func nanoOf(t time.Time) nanotime {
	if t.IsZero() {
		return 0
	}
	return nanotime(t.UnixNano())
}

// time is n as a time.Time (the zero Time for 0).
func (n nanotime) time() time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(n))
}

// after reports whether n is later than t: now.Before(deadline) reads
// deadline.after(now).
func (n nanotime) after(t time.Time) bool { return n > nanoOf(t) }

// touch records an access at now. A chain's depth stays valid only while
// the last access is the chain batch's (chain.go).
func (o *object) touch(now time.Time) {
	if n := nanoOf(now); n != o.lastAccess {
		o.lastAccess, o.chained = n, false
	}
}

// alloc is the number of bytes one replica occupies from its offset.
func (o *object) alloc() uint64 { return o.header() + o.size }

// header is the length of the object header in front of the value (0 when
// not durable).
func (o *object) header() uint64 { return uint64(o.hdr) }

type segment struct {
	key           string // in Master.segments: spec.Name, or "name#N" for a later segment sharing the name
	spec          SegmentSpec
	client        string
	alloc         *offsetalloc.Allocator
	id            uint32   // in Master.segTab
	objects       []uint32 // record IDs of the objects with a replica here, in no order; each replica knows its index (segobjects.go)
	draining      bool
	drainDeadline time.Time
	tombs         map[uint64]tomb                  // freed durable objects whose header is not zeroed yet, by offset
	fenced        []fencedTomb                     // zeroed tombstones a remover may still write zeros over, oldest first (tombs.go)
	diskRemove    []HeldObject                     // disk copies the owner must delete (sent with its next ping)
	peaks         mapPeaks                         // of tombs (shrink.go)
	diskObjects   int                              // disk copies on this segment's node
	diskBytes     uint64                           // their sizes
	dirty         map[uint64]dirtyExt              // Config.Scrub: freed extents by offset, not reported zeroed yet (scrub.go)
	dirtyFit      map[dirtyFit]map[uint64]struct{} // their offsets by owner and length, for the owner's puts
	dirtyBytes    uint64                           // their lengths
	heldBytes     uint64                           // of those, the lengths a write grant may still cover (scrub.go)
	held          heldHeap                         // held dirty extents, by the end of their hold, with stale entries (scrub.go)
	aging         []heldRef                        // other waiting dirty extents from agingHead on, in the order of their wait's end, with stale entries
	agingHead     int
	ready         map[uint64]uint64 // dirty extents whose wait ended, their lengths: what ping answers name
}

type client struct {
	id       string
	seen     atomic.Int64 // unix nanoseconds of the last sign of life (Ping without mu)
	segments map[string]*segment
	ns       string // key namespace of the tenant that registered it (BindClient; "" none)
}

func (c *client) lastSeen() time.Time { return time.Unix(0, c.seen.Load()) }

type zombie struct {
	seg       *segment
	off, size uint64
	releaseAt time.Time
	key       string
	seq, hdr  uint64
	alias     string // tomb.alias of the tombstone it leaves
}

// Master is the deterministic core of the store master: segments, objects,
// replicas, leases, pins, eviction and client liveness. It does no I/O; time
// comes from the injected clock.Clock and periodic work runs in Tick. All methods
// are safe for concurrent use.
type Master struct {
	cfg   Config
	clock clock.Clock
	// tenants is the per-tenant accounting (tenants.go); nil: off.
	tenants *tenantBook

	mu sync.Mutex
	// liveMu guards m.clients for Ping, which takes only it: liveness never
	// waits for mu. Writers of m.clients hold mu and liveMu; readers hold
	// either.
	liveMu    sync.RWMutex
	rng       *rand.Rand
	objects   *objTable           // every object, unfinished puts too (objtab.go)
	pending   map[uint32]struct{} // record IDs of the unfinished puts (the objects not complete)
	segments  map[string]*segment
	segTab    []*segment // by segment ID (nil: unmounted; IDs are not reused)
	segOrder  []*segment // sorted by name, then key
	clients   map[string]*client
	zombies   []zombie
	stats     Stats
	evictReq  bool   // a put ran out of space: evict on the next Tick too
	evictDebt uint64 // bytes a large eviction still has to free, in the next Ticks (evict.go)

	fruitlessUntil time.Time // no watermark eviction before this (last one freed nothing)

	seq      uint64            // last put sequence number handed out
	started  time.Time         // when the core was built
	removed  map[string]uint64 // key -> highest seq removed, kept for RestoreWindow
	evicted  map[string]uint64 // key -> highest seq evicted, kept for RestoreWindow
	evicting bool              // freeLocked runs for an eviction
	// replacing: goneLocked runs for a version a commit replaces in the
	// same hold (slot.go), which leaves the key's older headers in reused
	// slots where they are.
	replacing bool
	priors    map[uint32]prior     // reused put slots (record IDs) that may still hold an older version's header -> which (slot_reuse.go)
	priorSlot map[string]uint32    // key -> the reused slot (record ID) holding its older header
	tombIdx   map[string]*keyTombs // keys with tombstones not yet zeroed -> where (tombs.go)
	disk      map[string]*diskCopy
	offload   bool // evictLocked runs for the watermark: offload to disk where enabled

	viewVersion uint64 // set by New, read without locks

	tasks  *taskTable  // copy and move tasks (tasks.go), built on first use
	drains *drainTable // drain jobs (drainjobs.go), built on first use

	index  *keyIndex // visible keys in key order (list.go)
	counts counts    // gauges kept current (counts.go)
	peaks  mapPeaks  // of objects, pending and tombIdx (shrink.go)

	// Restore sessions (restore_session.go).
	restore restoreTable
	// stock: the object table's chunks made ahead by restore calls
	// (stock.go); set once by New.
	stock *chunkStock
}

// New returns a master core. cfg zero fields take defaults; clk nil means
// the system clock.
func New(cfg Config, clk clock.Clock) (*Master, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clk = clock.Or(clk)
	cfg = cfg.withDefaults()
	m := &Master{
		cfg:       cfg,
		clock:     clk,
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		objects:   newObjTable(),
		pending:   map[uint32]struct{}{},
		segTab:    []*segment{nil},
		segments:  map[string]*segment{},
		clients:   map[string]*client{},
		removed:   map[string]uint64{},
		evicted:   map[string]uint64{},
		tombIdx:   map[string]*keyTombs{},
		priors:    map[uint32]prior{},
		priorSlot: map[string]uint32{},
		disk:      map[string]*diskCopy{},
		started:   clk.Now(),
		seq:       uint64(clk.Now().UnixNano()),
	}
	m.index = newKeyIndex(m.objects)
	m.stock = &chunkStock{}
	m.objects.stock = m.stock
	m.viewVersion = uint64(clk.Now().UnixNano())
	m.counts.leases = newDeadlines(cfg.LeaseTTL)
	m.counts.softPins = newDeadlines(max(cfg.MaxSoftPinTTL, cfg.SoftPinTTL))
	if m.cfg.Logger == nil {
		m.cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return m, nil
}

// Config returns the effective configuration.
func (m *Master) Config() Config { return m.cfg }

// Now is the time on the core's clock.
func (m *Master) Now() time.Time { return m.clock.Now() }

// CheckKey refuses a key the core does not accept (empty, or longer than
// MaxKeyLen) with ErrInvalidParams.
func (m *Master) CheckKey(key string) error { return m.checkKey(key) }

func (m *Master) checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidParams)
	}
	if len(key) > m.cfg.MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrInvalidParams, len(key), m.cfg.MaxKeyLen)
	}
	return nil
}

// usageLocked sums the capacity and the allocated bytes of the mounted
// segments.
func (m *Master) usageLocked() (capacity, used uint64) {
	for _, s := range m.segOrder {
		capacity += s.alloc.Size()
		used += s.alloc.Used() - s.dirtyBytes // being zeroed: free soon, no reason to evict
	}
	return capacity, used
}

// segOf is the segment of a replica of an object (mounted: unmounting a
// segment drops its replicas).
func (m *Master) segOf(r replica) *segment { return m.segTab[r.seg] }

// reps are o's replicas (see objTable.reps).
func (m *Master) reps(o *object) []replica { return m.objects.reps(o) }

// ownerID is the ID of the client that put o ("" for a restored one).
func (m *Master) ownerID(o *object) string { return m.objects.owner(o) }

// keyOf is o's key.
func (m *Master) keyOf(o *object) string { return m.objects.key(o) }

func (m *Master) descriptors(o *object) []Replica { return m.descriptorsInto(nil, o) }

// descriptorsInto is descriptors in dst when it has room (made before the
// lock).
func (m *Master) descriptorsInto(dst []Replica, o *object) []Replica {
	rs := m.reps(o)
	out := dst[:0]
	if cap(out) < len(rs) {
		out = make([]Replica, len(rs))
	}
	out = out[:len(rs)]
	for i, r := range rs {
		s := m.segOf(r)
		out[i] = Replica{Segment: s.spec.Name, Endpoint: s.spec.Endpoint, Addr: s.spec.Base + r.off + o.header(), Size: o.size,
			HeaderLen: o.header(), Seq: o.seq}
	}
	return out
}

// info is o's ObjectInfo; key is o's key.
func (m *Master) info(o *object, key string) ObjectInfo {
	return ObjectInfo{Key: key, Size: o.size, CRC: o.crc, Complete: o.complete, Replicas: m.descriptors(o),
		Created: o.created.time(), LastAccess: o.lastAccess.time(), LeaseUntil: o.leaseUntil.time(), SoftPinUntil: o.softPinUntil.time(),
		HardPin: o.hardPin, View: m.viewVersion, Seq: o.seq}
}
