// Package storeprom exports a store client's counters to Prometheus: the
// roles that run a store client (`mooncake serve --kv-connector store`)
// add its collectors to their /metrics registry.
//
// HotCache is the client's hot cache (store.Config.HotCache):
//
//	mooncake_store_hot_cache_hits_total         gets served from the cache
//	mooncake_store_hot_cache_misses_total       gets of keys not held
//	mooncake_store_hot_cache_stale_total        gets of keys held at an older version
//	mooncake_store_hot_cache_hit_ratio          hits / gets since start
//	mooncake_store_hot_cache_entries            values held
//	mooncake_store_hot_cache_bytes              bytes of the values held
//	mooncake_store_hot_cache_capacity_bytes     the cache's size
//	mooncake_store_hot_cache_admitted_total     values taken in
//	mooncake_store_hot_cache_rejected_total     values refused by admission
//	mooncake_store_hot_cache_evicted_total      values dropped for room
//	mooncake_store_hot_cache_invalidated_total  values dropped by overwrites and removes
//	mooncake_store_hot_cache_get_seconds        histogram of single-key get latency,
//	                                            source="cache" or "remote"
//
// The collector reads the client's counters at scrape time (no counting of
// its own); a client with the cache off exports nothing.
package storeprom
