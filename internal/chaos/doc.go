// Package chaos drives a mooncake cluster of real processes on a
// internal/testbed bed: it lays the roles out on hosts (Cluster), puts a
// P/D completion load (Load) and a store put/get load (Ledger) on it, and
// measures what a fault does to users: requests by outcome kind, whether
// every request ended within its deadline, acknowledged puts readable and
// never stale, KV blocks left in use on the engines, and the recovery
// time (from the fault to the end of the last failed request; 0 when no
// request failed).
//
// The scenarios themselves live in chaos_test.go: a short suite that runs
// in `make test` (a couple of minutes; skipped without root or network
// namespaces) and the long suite behind MOONCAKE_CHAOS=long (`make
// chaos`). `mooncake bench soak` (internal/bench/soak) uses the same
// Cluster and loads.
//
// Layout of a Cluster on a bed of 6 hosts h1..h6: master (and proxy) on
// h1, a standby HA master on h6; storage nodes on h2, h3, h4; prefill
// engines on h2, h3; decode engines on h4, h5; every engine runs the tiny
// model. All traffic between roles crosses veths as TCP (hosts have
// different hostnames, so the transfer engine never picks shared memory).
package chaos
