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
