package master

import (
	"slices"
	"time"
)

// touchClient registers or refreshes a client; caller holds mu.
func (m *Master) touchClient(id string, now time.Time) *client {
	c := m.clients[id]
	if c == nil {
		c = &client{id: id, segments: map[string]*segment{}}
		m.liveMu.Lock()
		m.clients[id] = c
		m.liveMu.Unlock()
	}
	c.seen.Store(now.UnixNano())
	return c
}

// forgetClientLocked removes a client from the table Ping reads; caller
// holds mu.
func (m *Master) forgetClientLocked(id string) {
	m.liveMu.Lock()
	delete(m.clients, id)
	m.liveMu.Unlock()
}

// BindClient binds the known client clientID to ns, the key namespace of
// the tenant that registered it, unless it is bound already (the caller's
// scoping: ClientFree). Nothing for an unknown client or an empty ns.
func (m *Master) BindClient(clientID, ns string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.clients[clientID]; c != nil && c.ns == "" {
		c.ns = ns
	}
}

// ClientFree reports whether a caller of namespace ns may act as
// clientID: the client is unknown, bound to no namespace, or bound to ns.
func (m *Master) ClientFree(clientID, ns string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[clientID]
	return c == nil || c.ns == "" || c.ns == ns
}

// Leave forgets a client that is closing: it stops counting as live at
// once and is not dropped (nor counted as dropped) after ClientTTL. A client
// that still has mounted segments is kept (its segments are unmounted first,
// or dropped with it after its TTL); it reports whether the client is gone.
func (m *Master) Leave(clientID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[clientID]
	if c == nil {
		return true
	}
	if len(c.segments) > 0 {
		return false
	}
	m.forgetClientLocked(clientID)
	return true
}

// Ping records that a client is alive. A client the master does not know
// (because the master restarted or dropped it) is told to remount. It takes
// only liveMu, never mu: whatever metadata work holds the core's lock, a
// live client's pings are answered and recorded.
func (m *Master) Ping(clientID string) (viewVersion uint64, st PingStatus) {
	m.liveMu.RLock()
	c := m.clients[clientID]
	m.liveMu.RUnlock()
	if c == nil {
		return m.viewVersion, PingNeedRemount
	}
	c.seen.Store(m.clock.Now().UnixNano())
	return m.viewVersion, PingOK
}

// Tick runs the periodic work at the clock's current time, in this order:
// drop clients silent past ClientTTL (unmounting their segments), clean up
// puts older than PutTimeout whose owner is gone, release zombie space,
// finish graceful unmounts, evict when use passes the high watermark, and
// evict from the tenants above their own watermark (tenant_evict.go).
func (m *Master) Tick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	m.dropSilentClientsLocked(now)
	m.expirePutsLocked(now)
	m.releaseZombiesLocked(now)
	m.drainLocked(now)
	m.advanceDrainJobsLocked(now)
	m.evictAboveWatermarkLocked(now)
	m.tenantEvictLocked(now)
	m.shrinkLocked()
	if len(m.removed) > 0 && now.Sub(m.started) >= m.cfg.RestoreWindow {
		clear(m.removed)
		clear(m.evicted)
	}
}

// dropSilentClientsLocked forgets the clients silent past ClientTTL and
// unmounts their segments.
func (m *Master) dropSilentClientsLocked(now time.Time) {
	for id, c := range m.clients {
		if now.Sub(c.lastSeen()) <= m.cfg.ClientTTL {
			continue
		}
		names, replicas := make([]string, 0, len(c.segments)), 0
		for _, s := range c.segments {
			names = append(names, s.spec.Name)
			replicas += len(s.objects)
			m.unmountLocked(s)
		}
		m.forgetClientLocked(id)
		m.stats.ClientsDropped++
		slices.Sort(names)
		m.cfg.Logger.Info("master: client dropped (silent past its TTL); its segments are unmounted and their replicas gone",
			"client", id, "silent", now.Sub(c.lastSeen()).Round(time.Millisecond), "client_ttl", m.cfg.ClientTTL,
			"segments", names, "replicas", replicas)
	}
}
