package master

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/offsetalloc"
)

// MountSegment adds a client's segment to the pool. Mounting the same spec
// again is a no-op. As in Mooncake, segments of different clients (different
// transfer engine endpoints) may share a name; placement puts an object's
// replicas under distinct names. A second segment under one name from the
// same client is refused. A segment from the transfer engine endpoint of
// another client's segment under the same name (a restarted node reusing
// its port) replaces that old, stale segment and drops its replicas first.
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
	if c := m.clients[clientID]; c != nil {
		if s := c.segments[spec.Name]; s != nil {
			if s.spec == spec {
				m.touchClient(clientID, now)
				return nil
			}
			return fmt.Errorf("%w: %q", ErrSegmentExists, spec.Name)
		}
	}
	for _, s := range slices.Clone(m.namedLocked(spec.Name)) { // unmountLocked edits segOrder
		if s.client != clientID && s.spec.Endpoint == spec.Endpoint {
			// A new process serves this transfer engine endpoint: the old
			// owner is gone (its memory with it), so its segment is stale.
			m.unmountLocked(s)
		}
	}
	if spec.Size < m.cfg.Align {
		return fmt.Errorf("%w: segment of %d bytes is too small", ErrInvalidParams, spec.Size)
	}
	c := m.touchClient(clientID, now)
	s := &segment{key: m.segmentKeyLocked(spec.Name), spec: spec, client: clientID, alloc: offsetalloc.New(spec.Size, m.cfg.Align),
		tombs: map[uint64]tomb{}, id: uint32(len(m.segTab))}
	m.segTab = append(m.segTab, s)
	m.segments[s.key] = s
	i, _ := slices.BinarySearchFunc(m.segOrder, s, compareSegments)
	m.segOrder = slices.Insert(m.segOrder, i, s)
	c.segments[spec.Name] = s
	return nil
}

// segmentKeyLocked is a free internal key for a new segment named name: the
// name itself for the first segment under it, "name#2", "name#3", ... for
// segments of other clients sharing it.
func (m *Master) segmentKeyLocked(name string) string {
	key := name
	for n := 2; m.segments[key] != nil; n++ {
		key = fmt.Sprintf("%s#%d", name, n)
	}
	return key
}

// compareSegments orders segOrder: by name, then by internal key.
func compareSegments(a, b *segment) int {
	return cmp.Or(strings.Compare(a.spec.Name, b.spec.Name), strings.Compare(a.key, b.key))
}

// namedLocked is every mounted segment named name (of any client), in
// segOrder; the slice aliases segOrder.
func (m *Master) namedLocked(name string) []*segment {
	i, _ := slices.BinarySearchFunc(m.segOrder, name, func(a *segment, n string) int { return strings.Compare(a.spec.Name, n) })
	j := i
	for j < len(m.segOrder) && m.segOrder[j].spec.Name == name {
		j++
	}
	return m.segOrder[i:j:j]
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
	s, err := m.ownSegmentLocked(clientID, name)
	if err != nil {
		return err
	}
	m.cfg.Logger.Info("master: segment unmounted", "segment", name, "client", clientID, "replicas", len(s.objects))
	m.unmountLocked(s)
	return nil
}

// ownSegmentLocked is the segment name that clientID mounted:
// ErrSegmentNotFound without one, ErrNotOwner when another client's.
func (m *Master) ownSegmentLocked(clientID, name string) (*segment, error) {
	if c := m.clients[clientID]; c != nil {
		if s := c.segments[name]; s != nil {
			return s, nil
		}
	}
	if len(m.namedLocked(name)) > 0 {
		return nil, fmt.Errorf("%w: segment %q belongs to another client", ErrNotOwner, name)
	}
	return nil, fmt.Errorf("%w: %q", ErrSegmentNotFound, name)
}

// GracefulUnmount stops new allocations on a segment and unmounts it (in
// Tick) once no object with a replica on it is leased, or after grace.
func (m *Master) GracefulUnmount(clientID, name string, grace time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.ownSegmentLocked(clientID, name)
	if err != nil {
		return err
	}
	s.draining = true
	s.drainDeadline = m.clock.Now().Add(grace)
	m.drainLocked(m.clock.Now())
	return nil
}

func (m *Master) unmountLocked(s *segment) {
	for _, id := range s.objects { // s goes: its list is not kept up to date
		o := m.objects.at(id)
		n := int(o.nrep)
		m.objects.setReps(o, slices.DeleteFunc(m.reps(o), func(r replica) bool { return r.seg == s.id }))
		m.replicasChangedLocked(o, int(o.nrep)-n)
		if o.nrep == 0 {
			m.goneLocked(o)
			m.forgetLocked(o, m.keyOf(o))
		}
	}
	s.objects = nil
	for off, tb := range s.tombs {
		m.untombLocked(s, off, tb)
	}
	if s.heldBytes > 0 { // the tenants' charge for what was held here goes with it
		for _, d := range s.dirty {
			if d.held {
				m.tenantHeldLocked(d.owner, -int64(d.n))
			}
		}
	}
	m.dropSegmentDiskLocked(s)
	delete(m.segments, s.key)
	m.segTab[s.id] = nil
	m.segOrder = slices.DeleteFunc(m.segOrder, func(x *segment) bool { return x == s })
	if c := m.clients[s.client]; c != nil && c.segments[s.spec.Name] == s {
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
		for _, id := range s.objects {
			if m.objects.at(id).leaseUntil.after(now) {
				busy = true
				break
			}
		}
		if !busy || !now.Before(s.drainDeadline) {
			m.cfg.Logger.Info("master: segment unmounted (graceful)", "segment", s.spec.Name, "client", s.client,
				"replicas", len(s.objects), "grace_expired", busy)
			m.unmountLocked(s)
		}
	}
}

// Segments returns the mounted segments in name order (segments sharing a
// name in the order they were first mounted).
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
	return SegmentInfo{SegmentSpec: s.spec, Client: s.client, Used: s.alloc.Used(), Capacity: s.alloc.Size(), Objects: len(s.objects), Draining: s.draining}
}

// ClientSegment returns the info of clientID's segment named name:
// ErrSegmentNotFound when it has none (other clients' may share the name).
func (m *Master) ClientSegment(clientID, name string) (SegmentInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.clients[clientID]; c != nil {
		if s := c.segments[name]; s != nil {
			return s.info(), nil
		}
	}
	return SegmentInfo{}, fmt.Errorf("%w: %q of client %q", ErrSegmentNotFound, name, clientID)
}

// ClientSegmentNames returns the names of clientID's segments.
func (m *Master) ClientSegmentNames(clientID string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	if c := m.clients[clientID]; c != nil {
		for name := range c.segments {
			out = append(out, name)
		}
	}
	return out
}

// Segment returns one segment's info; when several clients share the name,
// the first of them in Segments' order.
func (m *Master) Segment(name string) (SegmentInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	named := m.namedLocked(name)
	if len(named) == 0 {
		return SegmentInfo{}, fmt.Errorf("%w: %q", ErrSegmentNotFound, name)
	}
	return named[0].info(), nil
}
