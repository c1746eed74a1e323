package master

import "time"

// Tier is where a copy of an object lives, in the vocabulary of vLLM's KV
// events ("medium").
type Tier string

// Tiers.
const (
	TierMemory Tier = "CPU"  // a storage node's memory segment
	TierDisk   Tier = "DISK" // a storage node's disk tier (root_fs_dir)
)

// EventSink receives the master's object events, Mooncake's
// enable_kv_events: an object became visible (PutEnd, or re-reported by a
// node after a restart) or stopped being visible (removed, evicted,
// dropped with its segments, replaced by an upsert), per tier. It is called
// with the master's lock held, in the order the changes happen, so it must
// not block or call the master: buffer and publish elsewhere (package
// internal/kvevents encodes vLLM's EventBatch).
type EventSink interface {
	Stored(key string, tier Tier)
	Removed(key string, tier Tier)
}

func (m *Master) emitStored(key string) {
	if m.cfg.Events != nil {
		m.cfg.Events.Stored(key, TierMemory)
	}
}

// goneLocked notes that o stops being visible: a Removed event when it was,
// and, during the restore window, its sequence number, so that a node
// remounting late cannot bring back this version (or an older one). It
// returns o's key.
func (m *Master) goneLocked(o *object) string { return m.goneAtLocked(o, m.keyOf(o), m.clock.Now()) }

// goneAtLocked is goneLocked of o, whose key is key, at now.
func (m *Master) goneAtLocked(o *object, key string, now time.Time) string {
	if o.complete {
		m.countAtLocked(o, -1, now)
		if !m.replacing { // a replacing commit hands its place in the index over (handOverIndexLocked)
			m.unindexObjectLocked(o, key)
			m.revokePriorLocked(key)
		}
	}
	if o.complete && m.cfg.Events != nil {
		m.cfg.Events.Removed(key, TierMemory)
	}
	if m.cfg.Durable && now.Sub(m.started) < m.cfg.RestoreWindow {
		gone := m.removed
		if m.evicting {
			gone = m.evicted // its copy may still reach the disk tier
		}
		gone[key] = max(gone[key], o.seq)
	}
	return key
}
