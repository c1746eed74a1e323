package master

// Summary is the master's state at a glance, per tier: what the dashboard
// (GET /api/summary) shows. Its figures are
// kept current as objects change, so taking it costs O(segments).
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

// Summary returns the counters, the gauges per tier and the segments. Every
// figure is kept current as objects change (counts.go): it costs
// O(segments), whatever the number of objects.
func (m *Master) Summary() Summary {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	sum := Summary{Stats: m.statsLocked(), Keys: m.index.len(), Replicas: m.counts.replicas, ReplicaBytes: m.counts.replicaBytes,
		Leased: m.counts.leases.live(now), HardPinned: m.counts.hardPinned, SoftPinned: m.counts.softPins.live(now)}
	sum.Segments = make([]SegmentSummary, len(m.segOrder))
	for i, s := range m.segOrder {
		sum.DiskBytes += s.diskBytes
		sum.Segments[i] = SegmentSummary{SegmentInfo: s.info(), DiskObjects: s.diskObjects, DiskBytes: s.diskBytes}
	}
	return sum
}
