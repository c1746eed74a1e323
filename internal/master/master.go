package master

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/master/alloc"
)

// Clock is the master's source of time; tests inject a fake.
type Clock interface{ Now() time.Time }

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// SegmentSpec describes a memory segment a client contributes.
type SegmentSpec struct {
	Name     string // unique name of the segment
	Endpoint string // transfer engine segment name of the owner ("host:port")
	Base     uint64 // virtual address of the first byte in the owner's memory
	Size     uint64 // length in bytes
}

// ReplicateConfig is the per-put replication policy.
type ReplicateConfig struct {
	Replicas          int           // wanted replicas on distinct segments (0 = 1); best effort
	PreferredSegments []string      // segments tried first, in order
	SoftPin           bool          // evicted only after every unpinned object
	SoftPinTTL        time.Duration // soft pin duration (0 = Config.SoftPinTTL)
	HardPin           bool          // never evicted
}

// Replica is where one copy of an object lives.
type Replica struct {
	Segment  string // segment name
	Endpoint string // transfer engine segment name holding the memory
	Addr     uint64 // remote virtual address of the first byte
	Size     uint64 // object size
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
	Objects, IncompleteObjects       int
	Capacity, Used                   uint64
	Segments, Clients                int
	PutStarts, Puts, PutRevokes      uint64
	Gets, GetMisses                  uint64
	Removes, Evictions, EvictedBytes uint64
	EvictionRuns, LeaseRejections    uint64
	ClientsDropped, PutsTimedOut     uint64
	UtilisationAtFirstEviction       float64 // used/capacity when the first eviction ran (0 = none yet)
	ViewVersion                      uint64
}

type replica struct {
	seg *segment
	off uint64
}

type object struct {
	key          string
	size         uint64
	crc          uint32
	complete     bool
	replicas     []replica
	owner        string
	created      time.Time
	leaseUntil   time.Time
	lastAccess   time.Time
	softPinUntil time.Time
	hardPin      bool
}

type segment struct {
	spec          SegmentSpec
	client        string
	alloc         *alloc.Allocator
	keys          map[string]struct{}
	draining      bool
	drainDeadline time.Time
}

type client struct {
	id       string
	lastSeen time.Time
	segments map[string]*segment
}

type zombie struct {
	seg       *segment
	off, size uint64
	releaseAt time.Time
}

// Master is the deterministic core of the store master: segments, objects,
// replicas, leases, pins, eviction and client liveness. It does no I/O; time
// comes from the injected Clock and periodic work runs in Tick. All methods
// are safe for concurrent use.
type Master struct {
	cfg   Config
	clock Clock

	mu       sync.Mutex
	rng      *rand.Rand
	objects  map[string]*object
	pending  map[string]*object // unfinished puts
	segments map[string]*segment
	segOrder []*segment // sorted by name
	clients  map[string]*client
	zombies  []zombie
	stats    Stats
	evictReq bool // a put ran out of space: evict on the next Tick too

	fruitlessUntil time.Time // no watermark eviction before this (last one freed nothing)

	listKeys  []string  // sorted snapshot of the keys for List pagination
	listBuilt time.Time // when listKeys was taken
}

// listSnapshotTTL bounds how stale List's key snapshot may be: pages are
// served from a sorted snapshot (checked against the live map), so keys
// added after it was taken appear within this delay.
const listSnapshotTTL = 2 * time.Second

// New returns a master core. cfg zero fields take defaults; clock nil means
// the system clock.
func New(cfg Config, clock Clock) (*Master, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = SystemClock{}
	}
	cfg = cfg.withDefaults()
	m := &Master{
		cfg:      cfg,
		clock:    clock,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		objects:  map[string]*object{},
		pending:  map[string]*object{},
		segments: map[string]*segment{},
		clients:  map[string]*client{},
	}
	m.stats.ViewVersion = uint64(clock.Now().UnixNano())
	return m, nil
}

// Config returns the effective configuration.
func (m *Master) Config() Config { return m.cfg }

func (m *Master) checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidParams)
	}
	if len(key) > m.cfg.MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrInvalidParams, len(key), m.cfg.MaxKeyLen)
	}
	return nil
}

// touchClient registers or refreshes a client; caller holds mu.
func (m *Master) touchClient(id string, now time.Time) *client {
	c := m.clients[id]
	if c == nil {
		c = &client{id: id, segments: map[string]*segment{}}
		m.clients[id] = c
	}
	c.lastSeen = now
	return c
}

// Ping records that a client is alive. A client the master does not know
// (because the master restarted or dropped it) is told to remount.
func (m *Master) Ping(clientID string) (viewVersion uint64, st PingStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[clientID]
	if c == nil {
		return m.stats.ViewVersion, PingNeedRemount
	}
	c.lastSeen = m.clock.Now()
	return m.stats.ViewVersion, PingOK
}

// MountSegment adds a client's segment to the pool. Mounting the same spec
// again is a no-op. A segment under a taken name is refused, unless it comes
// from the same transfer engine endpoint (a restarted node reusing its
// port): then the old, stale segment and its replicas are dropped first.
func (m *Master) MountSegment(clientID string, spec SegmentSpec) error {
	if clientID == "" || spec.Name == "" || spec.Endpoint == "" || spec.Size == 0 {
		return fmt.Errorf("%w: segment needs a client, a name, an endpoint and a size", ErrInvalidParams)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mountLocked(clientID, spec)
}

func (m *Master) mountLocked(clientID string, spec SegmentSpec) error {
	now := m.clock.Now()
	if s := m.segments[spec.Name]; s != nil {
		switch {
		case s.client == clientID && s.spec == spec:
			m.touchClient(clientID, now)
			return nil
		case s.client != clientID && s.spec.Endpoint == spec.Endpoint:
			// A new process serves this transfer engine endpoint: the old
			// owner is gone (its memory with it), so its segment is stale.
			m.unmountLocked(s)
		default:
			return fmt.Errorf("%w: %q", ErrSegmentExists, spec.Name)
		}
	}
	if spec.Size < m.cfg.Align {
		return fmt.Errorf("%w: segment of %d bytes is too small", ErrInvalidParams, spec.Size)
	}
	c := m.touchClient(clientID, now)
	s := &segment{spec: spec, client: clientID, alloc: alloc.New(spec.Size, m.cfg.Align), keys: map[string]struct{}{}}
	m.segments[spec.Name] = s
	i, _ := slices.BinarySearchFunc(m.segOrder, spec.Name, func(a *segment, n string) int { return strings.Compare(a.spec.Name, n) })
	m.segOrder = slices.Insert(m.segOrder, i, s)
	c.segments[spec.Name] = s
	return nil
}

// RemountSegments re-registers a client and all its segments, as a client
// does after being told PingNeedRemount. It is idempotent.
func (m *Master) RemountSegments(clientID string, specs []SegmentSpec) error {
	if clientID == "" {
		return fmt.Errorf("%w: empty client id", ErrInvalidParams)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touchClient(clientID, m.clock.Now())
	for _, s := range specs {
		if s.Name == "" || s.Endpoint == "" || s.Size == 0 {
			return fmt.Errorf("%w: segment needs a name, an endpoint and a size", ErrInvalidParams)
		}
		if err := m.mountLocked(clientID, s); err != nil {
			return err
		}
	}
	return nil
}

// UnmountSegment removes a segment at once; the replicas it held are dropped
// and objects left without a replica are removed.
func (m *Master) UnmountSegment(clientID, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.segments[name]
	if s == nil {
		return fmt.Errorf("%w: %q", ErrSegmentNotFound, name)
	}
	if s.client != clientID {
		return fmt.Errorf("%w: segment %q belongs to another client", ErrNotOwner, name)
	}
	m.unmountLocked(s)
	return nil
}

// GracefulUnmount stops new allocations on a segment and unmounts it (in
// Tick) once no object with a replica on it is leased, or after grace.
func (m *Master) GracefulUnmount(clientID, name string, grace time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.segments[name]
	if s == nil {
		return fmt.Errorf("%w: %q", ErrSegmentNotFound, name)
	}
	if s.client != clientID {
		return fmt.Errorf("%w: segment %q belongs to another client", ErrNotOwner, name)
	}
	s.draining = true
	s.drainDeadline = m.clock.Now().Add(grace)
	m.drainLocked(m.clock.Now())
	return nil
}

func (m *Master) unmountLocked(s *segment) {
	for key := range s.keys {
		o := m.objects[key]
		if o == nil {
			continue
		}
		o.replicas = slices.DeleteFunc(o.replicas, func(r replica) bool { return r.seg == s })
		if len(o.replicas) == 0 {
			delete(m.objects, key)
			delete(m.pending, key)
		}
	}
	delete(m.segments, s.spec.Name)
	m.segOrder = slices.DeleteFunc(m.segOrder, func(x *segment) bool { return x == s })
	if c := m.clients[s.client]; c != nil {
		delete(c.segments, s.spec.Name)
	}
	m.zombies = slices.DeleteFunc(m.zombies, func(z zombie) bool { return z.seg == s })
}

func (m *Master) drainLocked(now time.Time) {
	for _, s := range slices.Clone(m.segOrder) {
		if !s.draining {
			continue
		}
		busy := false
		for key := range s.keys {
			if o := m.objects[key]; o != nil && now.Before(o.leaseUntil) {
				busy = true
				break
			}
		}
		if !busy || !now.Before(s.drainDeadline) {
			m.unmountLocked(s)
		}
	}
}

// validPutLocked checks the parameters of a put.
func (m *Master) validPut(key string, size uint64, rc ReplicateConfig) error {
	if err := m.checkKey(key); err != nil {
		return err
	}
	if size == 0 {
		return fmt.Errorf("%w: empty value", ErrInvalidParams)
	}
	if rc.Replicas < 0 || rc.Replicas > m.cfg.MaxReplicas {
		return fmt.Errorf("%w: replica count %d not in [1,%d]", ErrInvalidParams, rc.Replicas, m.cfg.MaxReplicas)
	}
	if rc.SoftPinTTL < 0 || rc.SoftPinTTL > m.cfg.MaxSoftPinTTL {
		return fmt.Errorf("%w: soft pin TTL %v not in [0,%v]", ErrInvalidParams, rc.SoftPinTTL, m.cfg.MaxSoftPinTTL)
	}
	return nil
}

// PutStart allocates space for an object's replicas on distinct segments and
// returns where to write them. The object stays invisible until PutEnd. The
// replica count is best effort: fewer replicas than asked are returned when
// there are fewer segments with room, and at least one is always placed (or
// the call fails with ErrNoSpace). An existing key is refused with
// ErrObjectExists (Upsert overwrites).
func (m *Master) PutStart(clientID, key string, size uint64, rc ReplicateConfig) ([]Replica, error) {
	if err := m.validPut(key, size, rc); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	if o := m.objects[key]; o != nil {
		if o.complete || now.Sub(o.created) < m.cfg.PutTimeout {
			return nil, fmt.Errorf("%w: %q", ErrObjectExists, key)
		}
		m.preemptLocked(o, now) // a zombie put: take the key over
	}
	return m.putStartLocked(clientID, key, size, rc, now)
}

func (m *Master) putStartLocked(clientID, key string, size uint64, rc ReplicateConfig, now time.Time) ([]Replica, error) {
	var largest uint64
	for _, s := range m.segOrder {
		largest = max(largest, s.alloc.Size())
	}
	if len(m.segOrder) == 0 {
		return nil, fmt.Errorf("%w: no segment mounted", ErrNoSpace)
	}
	if size > largest {
		return nil, fmt.Errorf("%w: %d bytes, largest segment %d", ErrObjectTooLarge, size, largest)
	}
	want := max(rc.Replicas, 1)
	reps := m.placeLocked(clientID, size, want, rc.PreferredSegments)
	if len(reps) == 0 {
		m.evictLocked(now, 0)
		reps = m.placeLocked(clientID, size, want, rc.PreferredSegments)
		if len(reps) == 0 {
			m.evictReq = true
			return nil, fmt.Errorf("%w: %d bytes", ErrNoSpace, size)
		}
	}
	o := &object{key: key, size: size, replicas: reps, owner: clientID, created: now, lastAccess: now, hardPin: rc.HardPin}
	if rc.SoftPin {
		ttl := rc.SoftPinTTL
		if ttl == 0 {
			ttl = m.cfg.SoftPinTTL
		}
		o.softPinUntil = now.Add(ttl)
	}
	m.objects[key] = o
	m.pending[key] = o
	for _, r := range reps {
		r.seg.keys[key] = struct{}{}
	}
	m.stats.PutStarts++
	return o.descriptors(), nil
}

// placeLocked allocates up to want replicas on distinct segments.
func (m *Master) placeLocked(clientID string, size uint64, want int, preferred []string) []replica {
	var reps []replica
	used := map[*segment]bool{}
	try := func(s *segment) {
		if len(reps) >= want || s == nil || s.draining || used[s] {
			return
		}
		used[s] = true
		if off, ok := s.alloc.Alloc(size); ok {
			reps = append(reps, replica{seg: s, off: off})
		}
	}
	for _, name := range preferred {
		try(m.segments[name])
	}
	for _, s := range m.orderLocked(clientID) {
		if len(reps) >= want {
			break
		}
		try(s)
	}
	return reps
}

// orderLocked is the order in which the strategy tries segments.
func (m *Master) orderLocked(clientID string) []*segment {
	order := slices.Clone(m.segOrder)
	switch m.cfg.Strategy {
	case StrategyFreeRatioFirst:
		slices.SortStableFunc(order, func(a, b *segment) int {
			fa := float64(a.alloc.FreeBytes()) / float64(a.alloc.Size())
			fb := float64(b.alloc.FreeBytes()) / float64(b.alloc.Size())
			return cmp.Compare(fb, fa)
		})
	case StrategyLocalFirst:
		m.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		slices.SortStableFunc(order, func(a, b *segment) int {
			la, lb := a.client == clientID, b.client == clientID
			switch {
			case la && !lb:
				return -1
			case lb && !la:
				return 1
			}
			return 0
		})
	default:
		m.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	return order
}

func (o *object) descriptors() []Replica {
	out := make([]Replica, len(o.replicas))
	for i, r := range o.replicas {
		out[i] = Replica{Segment: r.seg.spec.Name, Endpoint: r.seg.spec.Endpoint, Addr: r.seg.spec.Base + r.off, Size: o.size}
	}
	return out
}

// freeLocked releases an object's space and forgets it.
func (m *Master) freeLocked(o *object) {
	for _, r := range o.replicas {
		r.seg.alloc.Free(r.off, o.size)
		delete(r.seg.keys, o.key)
	}
	delete(m.objects, o.key)
	delete(m.pending, o.key)
}

// preemptLocked forgets a zombie put but keeps its space reserved until the
// release timeout, since its writer may still be writing.
func (m *Master) preemptLocked(o *object, now time.Time) {
	release := o.created.Add(m.cfg.PutReleaseTimeout)
	for _, r := range o.replicas {
		delete(r.seg.keys, o.key)
		m.zombies = append(m.zombies, zombie{seg: r.seg, off: r.off, size: o.size, releaseAt: release})
	}
	delete(m.objects, o.key)
	delete(m.pending, o.key)
	m.stats.PutsTimedOut++
}

// PutEnd makes an object visible with the CRC32C of its value.
func (m *Master) PutEnd(clientID, key string, crc uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects[key]
	if o == nil {
		return fmt.Errorf("%w: %q (put expired or removed)", ErrObjectNotFound, key)
	}
	if o.complete {
		return fmt.Errorf("%w: %q", ErrObjectExists, key)
	}
	if o.owner != clientID {
		return fmt.Errorf("%w: %q", ErrNotOwner, key)
	}
	o.complete = true
	delete(m.pending, key)
	o.crc = crc
	o.lastAccess = m.clock.Now()
	m.stats.Puts++
	return nil
}

// PutRevoke abandons an unfinished put and releases its space.
func (m *Master) PutRevoke(clientID, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects[key]
	if o == nil || o.complete {
		return fmt.Errorf("%w: no put in progress for %q", ErrObjectNotFound, key)
	}
	if o.owner != clientID {
		return fmt.Errorf("%w: %q", ErrNotOwner, key)
	}
	m.freeLocked(o)
	m.stats.PutRevokes++
	return nil
}

// Upsert starts a put that replaces the key's current value. An unleased
// complete object of the same size keeps its space (the value is rewritten in
// place and the object is invisible until PutEnd); otherwise the old object
// is removed first. A leased object is refused with ErrObjectHasLease, a put
// in progress with ErrObjectExists.
func (m *Master) Upsert(clientID, key string, size uint64, rc ReplicateConfig) ([]Replica, error) {
	if err := m.validPut(key, size, rc); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	if o := m.objects[key]; o != nil {
		switch {
		case !o.complete && now.Sub(o.created) < m.cfg.PutTimeout:
			return nil, fmt.Errorf("%w: put in progress for %q", ErrObjectExists, key)
		case !o.complete:
			m.preemptLocked(o, now)
		case now.Before(o.leaseUntil):
			m.stats.LeaseRejections++
			return nil, fmt.Errorf("%w: %q", ErrObjectHasLease, key)
		case o.size == size && len(o.replicas) >= max(rc.Replicas, 1):
			o.complete, o.owner, o.created, o.crc = false, clientID, now, 0
			m.pending[key] = o
			o.lastAccess, o.hardPin, o.softPinUntil = now, rc.HardPin, time.Time{}
			if rc.SoftPin {
				o.softPinUntil = now.Add(cmp.Or(rc.SoftPinTTL, m.cfg.SoftPinTTL))
			}
			m.stats.PutStarts++
			return o.descriptors(), nil
		default:
			m.freeLocked(o)
		}
	}
	return m.putStartLocked(clientID, key, size, rc, now)
}

// GetReplicaList returns the complete object's replicas and grants a read
// lease of Config.LeaseTTL: until it ends the object is neither removed
// (without force) nor evicted.
func (m *Master) GetReplicaList(key string) (ObjectInfo, error) {
	if err := m.checkKey(key); err != nil {
		return ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	o := m.objects[key]
	if o == nil || !o.complete {
		m.stats.GetMisses++
		return ObjectInfo{}, fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	m.stats.Gets++
	o.lastAccess = now
	if until := now.Add(m.cfg.LeaseTTL); until.After(o.leaseUntil) {
		o.leaseUntil = until
	}
	info := o.info()
	info.LeaseTTL = m.cfg.LeaseTTL
	return info, nil
}

func (o *object) info() ObjectInfo {
	return ObjectInfo{Key: o.key, Size: o.size, CRC: o.crc, Complete: o.complete, Replicas: o.descriptors(),
		Created: o.created, LastAccess: o.lastAccess, LeaseUntil: o.leaseUntil, SoftPinUntil: o.softPinUntil, HardPin: o.hardPin}
}

// Query returns an object's metadata without granting a lease or touching
// its recency (admin use). Unfinished puts are reported too.
func (m *Master) Query(key string) (ObjectInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects[key]
	if o == nil {
		return ObjectInfo{}, fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	return o.info(), nil
}

// Exist reports whether a complete object exists. Unlike Mooncake it grants
// no lease (so that stat-then-remove works); it refreshes recency.
func (m *Master) Exist(key string) (bool, error) {
	if err := m.checkKey(key); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects[key]
	if o == nil || !o.complete {
		return false, nil
	}
	o.lastAccess = m.clock.Now()
	return true, nil
}

// Remove deletes a complete object. A leased object is refused with
// ErrObjectHasLease unless force; force also removes an unfinished put.
func (m *Master) Remove(key string, force bool) error {
	if err := m.checkKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects[key]
	if o == nil || (!o.complete && !force) {
		return fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	if !force && m.clock.Now().Before(o.leaseUntil) {
		m.stats.LeaseRejections++
		return fmt.Errorf("%w: %q", ErrObjectHasLease, key)
	}
	m.freeLocked(o)
	m.stats.Removes++
	return nil
}

// RemoveByRegex removes the complete objects whose key matches the RE2
// pattern, skipping leased ones unless force, and returns how many it removed.
func (m *Master) RemoveByRegex(pattern string, force bool) (int, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, fmt.Errorf("%w: bad regex: %v", ErrInvalidParams, err)
	}
	return m.removeWhere(func(k string) bool { return re.MatchString(k) }, force), nil
}

// RemoveAll removes every complete object (leased ones only if force) and
// returns how many it removed. Unfinished puts are left alone.
func (m *Master) RemoveAll(force bool) int {
	return m.removeWhere(func(string) bool { return true }, force)
}

func (m *Master) removeWhere(match func(string) bool, force bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	n := 0
	for k, o := range m.objects {
		if !o.complete || !match(k) {
			continue
		}
		if !force && now.Before(o.leaseUntil) {
			m.stats.LeaseRejections++
			continue
		}
		m.freeLocked(o)
		n++
	}
	m.stats.Removes += uint64(n)
	return n
}

// KeyInfo is one row of List.
type KeyInfo struct {
	Key      string
	Size     uint64
	Replicas int
}

// List returns up to limit complete objects whose key has the prefix and
// sorts after the cursor `after`, in key order, and the cursor of the next
// page ("" when this is the last page). limit <= 0 means 1000. Pages come
// from a sorted snapshot of the keys refreshed every listSnapshotTTL (or
// when a listing starts), each key checked against the live objects, so a
// page costs O(log n + limit) and never shows a removed key.
func (m *Master) List(prefix, after string, limit int) ([]KeyInfo, string) {
	if limit <= 0 {
		limit = 1000
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	if m.listKeys == nil || after == "" || now.Sub(m.listBuilt) > listSnapshotTTL {
		keys := make([]string, 0, len(m.objects))
		for k := range m.objects {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		m.listKeys, m.listBuilt = keys, now
	}
	start := max(prefix, after)
	i, _ := slices.BinarySearch(m.listKeys, start)
	var out []KeyInfo
	next := ""
	for ; i < len(m.listKeys); i++ {
		k := m.listKeys[i]
		if k <= after {
			continue
		}
		if !strings.HasPrefix(k, prefix) {
			break
		}
		o := m.objects[k]
		if o == nil || !o.complete {
			continue
		}
		if len(out) == limit {
			next = out[len(out)-1].Key
			break
		}
		out = append(out, KeyInfo{Key: k, Size: o.size, Replicas: len(o.replicas)})
	}
	return out, next
}

// Tick runs the periodic work at the clock's current time: drop clients
// silent past ClientTTL (unmounting their segments), clean up puts older
// than PutTimeout whose owner is gone and release zombie space, finish
// graceful unmounts, and evict when use passes the high watermark.
func (m *Master) Tick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for id, c := range m.clients {
		if now.Sub(c.lastSeen) <= m.cfg.ClientTTL {
			continue
		}
		for _, s := range c.segments {
			m.unmountLocked(s)
		}
		delete(m.clients, id)
		m.stats.ClientsDropped++
	}
	for _, o := range m.pending {
		if now.Sub(o.created) < m.cfg.PutTimeout {
			continue
		}
		if _, alive := m.clients[o.owner]; !alive || now.Sub(o.created) >= m.cfg.PutReleaseTimeout {
			m.freeLocked(o) // nobody will finish it, or it is far too late
			m.stats.PutsTimedOut++
		}
	}
	m.zombies = slices.DeleteFunc(m.zombies, func(z zombie) bool {
		if now.Before(z.releaseAt) {
			return false
		}
		z.seg.alloc.Free(z.off, z.size)
		return true
	})
	m.drainLocked(now)
	var capacity, used uint64
	for _, s := range m.segOrder {
		capacity += s.alloc.Size()
		used += s.alloc.Used()
	}
	over := capacity > 0 && float64(used) > m.cfg.HighWatermark*float64(capacity)
	if m.evictReq || (over && !now.Before(m.fruitlessUntil)) {
		m.evictReq = false
		if m.evictLocked(now, 0) == 0 {
			// Everything left is leased, pinned or unfinished: do not sort
			// all objects again on every tick.
			m.fruitlessUntil = now.Add(time.Second)
		}
	}
}

// Evict runs one eviction now (as Tick does above the watermark) and returns
// the bytes freed.
func (m *Master) Evict() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.evictLocked(m.clock.Now(), 0)
}

// evictLocked frees about EvictionRatio of the capacity (or target bytes
// when > 0), least recently used first, never touching leased, unfinished or
// hard-pinned objects and taking soft-pinned ones only after all others.
func (m *Master) evictLocked(now time.Time, target uint64) uint64 {
	var capacity, used uint64
	for _, s := range m.segOrder {
		capacity += s.alloc.Size()
		used += s.alloc.Used()
	}
	if target == 0 {
		target = uint64(m.cfg.EvictionRatio * float64(capacity))
	}
	var plain, pinned []*object
	for _, o := range m.objects {
		if !o.complete || o.hardPin || now.Before(o.leaseUntil) {
			continue
		}
		if now.Before(o.softPinUntil) {
			pinned = append(pinned, o)
		} else {
			plain = append(plain, o)
		}
	}
	lru := func(a, b *object) int {
		if c := a.lastAccess.Compare(b.lastAccess); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	}
	slices.SortFunc(plain, lru)
	slices.SortFunc(pinned, lru)
	m.stats.EvictionRuns++
	if m.stats.UtilisationAtFirstEviction == 0 && capacity > 0 {
		m.stats.UtilisationAtFirstEviction = float64(used) / float64(capacity)
	}
	var freed uint64
	for _, o := range append(plain, pinned...) {
		if freed >= target {
			break
		}
		freed += o.size * uint64(len(o.replicas))
		m.freeLocked(o)
		m.stats.Evictions++
	}
	m.stats.EvictedBytes += freed
	return freed
}

// Segments returns the mounted segments in name order.
func (m *Master) Segments() []SegmentInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]SegmentInfo, 0, len(m.segOrder))
	for _, s := range m.segOrder {
		out = append(out, s.info())
	}
	return out
}

func (s *segment) info() SegmentInfo {
	return SegmentInfo{SegmentSpec: s.spec, Client: s.client, Used: s.alloc.Used(), Capacity: s.alloc.Size(), Objects: len(s.keys), Draining: s.draining}
}

// Segment returns one segment's info.
func (m *Master) Segment(name string) (SegmentInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.segments[name]
	if s == nil {
		return SegmentInfo{}, fmt.Errorf("%w: %q", ErrSegmentNotFound, name)
	}
	return s.info(), nil
}

// Stats returns the counters and current gauges.
func (m *Master) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stats
	st.IncompleteObjects = len(m.pending)
	st.Objects = len(m.objects) - len(m.pending)
	for _, s := range m.segOrder {
		st.Capacity += s.alloc.Size()
		st.Used += s.alloc.Used()
	}
	st.Segments = len(m.segOrder)
	st.Clients = len(m.clients)
	return st
}
