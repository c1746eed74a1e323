package master

// Stats returns the counters and current gauges.
func (m *Master) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statsLocked()
}

func (m *Master) statsLocked() Stats {
	st := m.stats
	st.ViewVersion = m.viewVersion
	st.PutSlots = m.counts.putSlots
	st.IncompleteObjects = len(m.pending) - st.PutSlots
	st.Objects = m.objects.len() - len(m.pending)
	st.Capacity, st.Used = m.usageLocked()
	st.Scrubbing = m.dirtyBytesLocked()
	m.settleAllHeldLocked()
	for _, s := range m.segOrder {
		st.ScrubHeld += s.heldBytes
	}
	st.Segments = len(m.segOrder)
	st.Clients = len(m.clients)
	st.DiskObjects = len(m.disk)
	return st
}
