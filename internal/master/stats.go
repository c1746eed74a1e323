package master

import "strings"

// Stats returns the counters and current gauges.
func (m *Master) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statsLocked()
}

func (m *Master) statsLocked() Stats {
	st := m.stats
	st.ViewVersion = m.viewVersion
	for k := range m.pending {
		if strings.HasPrefix(k, SlotPrefix) {
			st.PutSlots++
		}
	}
	st.IncompleteObjects = len(m.pending) - st.PutSlots
	st.Objects = len(m.objects) - len(m.pending)
	st.Capacity, st.Used = m.usageLocked()
	st.Segments = len(m.segOrder)
	st.Clients = len(m.clients)
	st.DiskObjects = len(m.disk)
	return st
}
