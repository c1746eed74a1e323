// Package trace is the engine behind `mooncake bench trace`: it replays a
// decoded Mooncake trace (internal/tracesim) through the cache eviction
// policies of one global pool at each capacity and through the prefill
// routers (per-instance caches), and returns every figure in a Result.
//
// Run takes the decoded trace, the capacities and the routing
// configuration; the ideal (unlimited) hit ratio is computed directly from
// the trace and every policy's hit rate is reported as a ratio to it, next
// to the paper's Table 1 where it has a figure. Result.Optimum holds
// Belady's offline optimum per capacity (tracesim.SimulateBelady) and
// GapShare a policy's share of the gap between LRU and it. FindTrace locates the
// default trace (DefaultTraceRel from the repository root) and
// ParseCapacities reads the --capacities list ("inf" is tracesim.Unlimited).
// Nothing here measures time: the simulation is deterministic.
package trace
