package master

// Summary is the master's state at a glance, per tier: what the dashboard
// (GET /api/summary) shows. Taking it walks every object under the lock,
// so it is meant for a poll every second or so, not for a hot path.
type Summary struct {
	Stats    Stats
	Keys     int // distinct complete keys, in memory or only on a disk tier
	Replicas int // memory replicas of complete objects
	// Bytes of the complete objects' memory replicas (sizes, without
	// headers or alignment; SegmentInfo.Used counts allocations).
	ReplicaBytes uint64
	Leased       int    // complete objects under a read lease now
	HardPinned   int    // complete objects never evicted
	SoftPinned   int    // complete objects evicted last (pin not expired)
	DiskBytes    uint64 // sizes of the disk copies the master knows
	Segments     []SegmentSummary
}

// SegmentSummary is one segment in a Summary: its memory tier (the
// SegmentInfo) and the copies on its node's disk tier.
type SegmentSummary struct {
	SegmentInfo
	DiskObjects int
	DiskBytes   uint64
}

// Summary returns the counters, the gauges per tier and the segments.
func (m *Master) Summary() Summary {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	sum := Summary{Stats: m.statsLocked()}
	for _, o := range m.objects {
		if !o.complete {
			continue
		}
		sum.Keys++
		sum.Replicas += len(o.replicas)
		sum.ReplicaBytes += o.size * uint64(len(o.replicas))
		if o.leaseUntil.After(now) {
			sum.Leased++
		}
		switch {
		case o.hardPin:
			sum.HardPinned++
		case o.softPinUntil.After(now):
			sum.SoftPinned++
		}
	}
	disk := map[*segment]SegmentSummary{}
	for k, d := range m.disk {
		if o := m.objects[k]; o == nil || !o.complete {
			sum.Keys++
		}
		sum.DiskBytes += d.size
		s := disk[d.seg]
		s.DiskObjects++
		s.DiskBytes += d.size
		disk[d.seg] = s
	}
	sum.Segments = make([]SegmentSummary, len(m.segOrder))
	for i, s := range m.segOrder {
		d := disk[s]
		sum.Segments[i] = SegmentSummary{SegmentInfo: s.info(), DiskObjects: d.DiskObjects, DiskBytes: d.DiskBytes}
	}
	return sum
}
