package masterserver

import (
	"github.com/kvcache-go/mooncake/internal/master"
	"net/http"
)

// SummaryJSON is the body of GET /api/summary: the master's state at a
// glance (Summary), the data of the master's dashboard page.
type SummaryJSON struct {
	TimeUnixMs  int64         `json:"time_unix_ms"`
	Objects     int           `json:"objects"`      // complete objects in memory
	PendingPuts int           `json:"pending_puts"` // puts started and not finished
	Keys        int           `json:"keys"`         // distinct complete keys, memory or disk
	Replicas    int           `json:"replicas"`     // memory replicas of complete objects
	Leased      int           `json:"leased"`       // objects under a read lease now
	HardPinned  int           `json:"hard_pinned"`
	SoftPinned  int           `json:"soft_pinned"`
	Segments    int           `json:"segments"` // mounted segments
	Clients     int           `json:"clients"`  // live clients
	Memory      MemoryJSON    `json:"memory"`
	Disk        DiskJSON      `json:"disk"`
	Counters    CountersJSON  `json:"counters"`
	SegmentList []SegmentJSON `json:"segment_list"`
	Utilisation float64       `json:"utilisation_at_first_eviction"` // used/capacity at the first eviction (0 = none yet)
	Config      ConfigJSON    `json:"config"`
}

// ConfigJSON is the part of the master's configuration the dashboard shows.
type ConfigJSON struct {
	HighWatermark float64 `json:"high_watermark"`
	EvictionRatio float64 `json:"eviction_ratio"`
	LeaseTTLMs    int64   `json:"lease_ttl_ms"`
	ClientTTLMs   int64   `json:"client_ttl_ms"`
	Durable       bool    `json:"durable"`
}

// MemoryJSON is the memory tier in SummaryJSON: the mounted segments'
// bytes (Used counts allocations: headers and alignment included), the
// replicas of complete objects and their value sizes.
type MemoryJSON struct {
	Capacity uint64 `json:"capacity"`
	Used     uint64 `json:"used"`
	Objects  int    `json:"objects"`
	Bytes    uint64 `json:"bytes"`
}

// DiskJSON is the disk tier in SummaryJSON: the copies on the nodes' disk
// tiers that the master knows (a node's disk capacity is its own).
type DiskJSON struct {
	Objects int    `json:"objects"`
	Bytes   uint64 `json:"bytes"`
}

// CountersJSON are the master's counters since it started.
type CountersJSON struct {
	PutStarts       uint64 `json:"put_starts"`
	Puts            uint64 `json:"puts"`
	PutRevokes      uint64 `json:"put_revokes"`
	PutsTimedOut    uint64 `json:"puts_timed_out"`
	Gets            uint64 `json:"gets"`
	GetMisses       uint64 `json:"get_misses"`
	DiskGets        uint64 `json:"disk_gets"`
	Removes         uint64 `json:"removes"`
	Evictions       uint64 `json:"evictions"`
	EvictedBytes    uint64 `json:"evicted_bytes"`
	EvictionRuns    uint64 `json:"eviction_runs"`
	LeaseRejections uint64 `json:"lease_rejections"`
	ClientsDropped  uint64 `json:"clients_dropped"`
}

// SegmentJSON is one segment in SummaryJSON: its memory tier and its
// node's disk tier (DiskTier: the node has one).
type SegmentJSON struct {
	Name        string `json:"name"`
	Endpoint    string `json:"endpoint"`
	Client      string `json:"client"`
	Capacity    uint64 `json:"capacity"`
	Used        uint64 `json:"used"`
	Objects     int    `json:"objects"`
	Draining    bool   `json:"draining"`
	DiskTier    bool   `json:"disk_tier"`
	DiskObjects int    `json:"disk_objects"`
	DiskBytes   uint64 `json:"disk_bytes"`
}

func (a admin) summary(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, summaryJSON(a.m.Summary(), a.m))
}

func summaryJSON(s master.Summary, m *master.Master) SummaryJSON {
	st := s.Stats
	out := SummaryJSON{
		TimeUnixMs: m.Now().UnixMilli(), Objects: st.Objects, PendingPuts: st.IncompleteObjects,
		Keys: s.Keys, Replicas: s.Replicas, Leased: s.Leased, HardPinned: s.HardPinned, SoftPinned: s.SoftPinned,
		Segments: st.Segments, Clients: st.Clients,
		Memory: MemoryJSON{Capacity: st.Capacity, Used: st.Used, Objects: s.Replicas, Bytes: s.ReplicaBytes},
		Disk:   DiskJSON{Objects: st.DiskObjects, Bytes: s.DiskBytes},
		Counters: CountersJSON{PutStarts: st.PutStarts, Puts: st.Puts, PutRevokes: st.PutRevokes, PutsTimedOut: st.PutsTimedOut,
			Gets: st.Gets, GetMisses: st.GetMisses, DiskGets: st.DiskGets, Removes: st.Removes, Evictions: st.Evictions,
			EvictedBytes: st.EvictedBytes, EvictionRuns: st.EvictionRuns, LeaseRejections: st.LeaseRejections,
			ClientsDropped: st.ClientsDropped},
		Utilisation: st.UtilisationAtFirstEviction,
		SegmentList: make([]SegmentJSON, len(s.Segments)),
	}
	cfg := m.Config()
	out.Config = ConfigJSON{HighWatermark: cfg.HighWatermark, EvictionRatio: cfg.EvictionRatio,
		LeaseTTLMs: cfg.LeaseTTL.Milliseconds(), ClientTTLMs: cfg.ClientTTL.Milliseconds(), Durable: cfg.Durable}
	for i, g := range s.Segments {
		out.SegmentList[i] = SegmentJSON{Name: g.Name, Endpoint: g.Endpoint, Client: g.Client, Capacity: g.Capacity, Used: g.Used,
			Objects: g.Objects, Draining: g.Draining, DiskTier: g.DiskURL != "", DiskObjects: g.DiskObjects, DiskBytes: g.DiskBytes}
	}
	return out
}
