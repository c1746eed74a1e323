package master

import (
	"slices"
	"strings"
)

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
	m.refreshListSnapshotLocked(after == "")
	return m.listPageLocked(prefix, after, limit)
}

// refreshListSnapshotLocked retakes the sorted key snapshot when there is
// none, when a listing starts, or when it is older than listSnapshotTTL.
func (m *Master) refreshListSnapshotLocked(starting bool) {
	now := m.clock.Now()
	if m.listKeys != nil && !starting && now.Sub(m.listBuilt) <= listSnapshotTTL {
		return
	}
	keys := make([]string, 0, len(m.objects))
	for k := range m.objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	m.listKeys, m.listBuilt = keys, now
}

// listPageLocked reads one page from the snapshot, skipping keys that are
// gone or unfinished.
func (m *Master) listPageLocked(prefix, after string, limit int) ([]KeyInfo, string) {
	i, _ := slices.BinarySearch(m.listKeys, max(prefix, after))
	var out []KeyInfo
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
			return out, out[len(out)-1].Key
		}
		out = append(out, KeyInfo{Key: k, Size: o.size, Replicas: len(o.replicas)})
	}
	return out, ""
}
