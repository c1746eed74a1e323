package master

import (
	"fmt"
)

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
	o := m.objects.get(key)
	if o == nil || !o.complete {
		if info, ok := m.diskInfoLocked(key); ok {
			m.stats.Gets++
			m.stats.DiskGets++
			info.LeaseTTL = m.cfg.LeaseTTL
			return info, nil
		}
		m.stats.GetMisses++
		return ObjectInfo{}, fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	m.stats.Gets++
	o.touch(now)
	m.leaseLocked(o, now.Add(m.cfg.LeaseTTL))
	info := m.info(o, key)
	info.LeaseTTL = m.cfg.LeaseTTL
	return info, nil
}

// Query returns an object's metadata without granting a lease or touching
// its recency (admin use). Unfinished puts are reported too.
func (m *Master) Query(key string) (ObjectInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects.get(key)
	if o == nil {
		if info, ok := m.diskInfoLocked(key); ok {
			return info, nil
		}
		return ObjectInfo{}, fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	return m.info(o, key), nil
}

// Exist reports whether a complete object exists. Unlike Mooncake it grants
// no lease (so that stat-then-remove works); it refreshes recency.
func (m *Master) Exist(key string) (bool, error) {
	if err := m.checkKey(key); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects.get(key)
	if o == nil || !o.complete {
		_, ok := m.diskInfoLocked(key)
		return ok, nil
	}
	o.touch(m.clock.Now())
	return true, nil
}

// BatchExist reports, in order, whether each key names a complete object
// (in memory or on a disk tier), as Exist does, under one lock; an invalid
// key reports false. It refreshes the recency of the objects found.
func (m *Master) BatchExist(keys []string) []bool {
	out := make([]bool, len(keys))
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for i, k := range keys {
		if m.checkKey(k) != nil {
			continue
		}
		if o := m.objects.get(k); o != nil && o.complete {
			o.touch(now)
			out[i] = true
		} else if _, ok := m.diskInfoLocked(k); ok {
			out[i] = true
		}
	}
	m.touchChainsLocked(keys, now)
	return out
}
