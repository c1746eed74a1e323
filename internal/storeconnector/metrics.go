package storeconnector

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the connector's metrics (read from Stats at scrape
// time), to register with the engine server's registry.
func (c *Connector) Collectors() []prometheus.Collector {
	counter := func(name, help string, f func(Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(c.Stats())) })
	}
	gauge := func(name, help string, f func(Stats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(f(c.Stats())) })
	}
	return []prometheus.Collector{
		counter("mooncake_store_kv_loaded_tokens_total", "Prompt tokens loaded from the store.", func(s Stats) uint64 { return s.LoadedTokens }),
		counter("mooncake_store_kv_loads_ok_total", "Requests whose store load completed.", func(s Stats) uint64 { return s.LoadsOK }),
		counter("mooncake_store_kv_loads_failed_total", "Requests with blocks that failed to load (recomputed).", func(s Stats) uint64 { return s.LoadsFailed }),
		counter("mooncake_store_kv_loads_aborted_total", "Loads stopped because their request finished.", func(s Stats) uint64 { return s.AbortedLoads }),
		counter("mooncake_store_kv_lookup_errors_total", "Store existence checks that failed (answered as a miss).", func(s Stats) uint64 { return s.LookupErrors }),
		counter("mooncake_store_kv_saved_blocks_total", "Blocks written to the store.", func(s Stats) uint64 { return s.SavedBlocks }),
		counter("mooncake_store_kv_skipped_blocks_total", "Blocks not written because the store had them.", func(s Stats) uint64 { return s.SkippedBlocks }),
		counter("mooncake_store_kv_save_errors_total", "Blocks whose write to the store failed.", func(s Stats) uint64 { return s.SaveErrors }),
		counter("mooncake_store_kv_dropped_saves_total", "Save batches dropped because the queue was full.", func(s Stats) uint64 { return s.DroppedSaves }),
		gauge("mooncake_store_kv_loads_in_flight", "Store loads running.", func(s Stats) int { return s.LoadsInFlight }),
		gauge("mooncake_store_kv_saves_queued", "Save batches waiting or being written.", func(s Stats) int { return s.SavesQueued }),
	}
}
