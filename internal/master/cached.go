package master

// GetReplicaListIf is GetReplicaList for a reader that holds the value of
// key at version (view, seq) (a store client's hot cache). When that is
// still the key's current version (view is this master's incarnation and
// seq the sequence number of the complete object, or of its only copy, on
// a disk tier) it answers Unchanged with the object's size, CRC and
// version and no replicas, takes no lease (no replica is read), and counts
// and touches the read as GetReplicaList does, so the key stays recent for
// eviction. Otherwise it is GetReplicaList. A seq of 0 holds nothing.
//
// A put, upsert or restore that changes the key's value gives it a new
// sequence number (put.go, slot.go), and a master restart a new view, so
// Unchanged proves the caller's value is the key's value at the time of the
// answer.
func (m *Master) GetReplicaListIf(key string, view, seq uint64) (ObjectInfo, error) {
	if seq == 0 || view != m.viewVersion {
		return m.GetReplicaList(key)
	}
	if err := m.checkKey(key); err != nil {
		return ObjectInfo{}, err
	}
	m.mu.Lock()
	o := m.objects.get(key)
	var info ObjectInfo
	switch {
	case o != nil && o.complete && o.seq == seq:
		o.touch(m.clock.Now())
		info = ObjectInfo{Key: key, Size: o.size, CRC: o.crc, Complete: true, View: view, Seq: seq, Unchanged: true}
	case o == nil || !o.complete:
		d, ok := m.diskInfoLocked(key)
		if !ok || d.Seq != seq {
			m.mu.Unlock()
			return m.GetReplicaList(key)
		}
		info = ObjectInfo{Key: key, Size: d.Size, CRC: d.CRC, Complete: true, View: view, Seq: seq, Unchanged: true}
	default:
		m.mu.Unlock()
		return m.GetReplicaList(key)
	}
	m.stats.Gets++
	m.stats.CachedGets++
	m.mu.Unlock()
	return info, nil
}
