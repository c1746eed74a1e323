package service

import (
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvcache-go/mooncake/internal/conductor"
)

// publisherSummary is one publisher in /api/summary.
type publisherSummary struct {
	Key       string `json:"key"`
	Type      string `json:"type"`
	Instance  string `json:"instance_id"`
	Tenant    string `json:"tenant_id"`
	DPRank    int    `json:"dp_rank"`
	Model     string `json:"modelname"`
	BlockSize int    `json:"block_size"`
	Endpoint  string `json:"endpoint"`

	Live           int    `json:"blocks"`
	Stored         uint64 `json:"stored"`
	Removed        uint64 `json:"removed"`
	RemovedUnknown uint64 `json:"removed_unknown"`
	Refused        uint64 `json:"refused"` // orphaned, unhashable, unresolved, bad medium, capacity, owners full
	Clears         uint64 `json:"clears"`
	Batches        uint64 `json:"batches"`
	Gaps           uint64 `json:"gaps"`
	Replayed       uint64 `json:"replayed"`
	Bad            uint64 `json:"bad"`
}

// summary is GET /api/summary, what the dashboard page draws: the index's
// size, its contexts, and each publisher's event stream (counters kept as
// events come; the cost grows with publishers and contexts, not blocks).
func (s *Service) summary(*http.Request) (any, error) {
	v := s.idx.GlobalView()
	st := s.idx.Stats()
	subs := s.SubStats()
	pubs := []publisherSummary{}
	for _, r := range s.idx.Registrations() {
		k := r.Key()
		e, b := st[k], subs[k]
		pubs = append(pubs, publisherSummary{Key: k.String(), Type: string(r.Kind), Instance: r.Instance, Tenant: r.Tenant, DPRank: r.DPRank,
			Model: r.Model, BlockSize: r.BlockSize, Endpoint: r.Endpoint, Live: e.Live, Stored: e.BlocksStored, Removed: e.BlocksRemoved,
			RemovedUnknown: e.RemovedUnknown, Refused: e.Orphaned + e.Unhashable + e.Unresolved + e.BadMedium + e.CapacityDropped + e.OwnersFull,
			Clears: e.Clears, Batches: e.Batches, Gaps: b.Gaps, Replayed: b.Replayed, Bad: b.Bad})
	}
	sort.Slice(pubs, func(i, j int) bool { return pubs[i].Key < pubs[j].Key })
	queries := map[string]float64{}
	for _, ep := range []string{"query", "query_by_hash"} {
		for _, code := range []string{"200", "400", "404"} {
			if c, err := s.m.requests.GetMetricWithLabelValues(ep, code); err == nil {
				queries[code] += counterValue(c)
			}
		}
	}
	return map[string]any{"time_unix_ms": time.Now().UnixMilli(), "blocks": v.Blocks, "context_count": v.ContextCount,
		"contexts": v.Contexts, "publishers": pubs, "queries": queries, "max_blocks": s.cfg.Index.MaxBlocks,
		"seed": s.idx.Hasher().Seed, "max_owners": conductor.MaxOwners}, nil
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil || m.Counter == nil {
		return 0
	}
	return m.Counter.GetValue()
}
