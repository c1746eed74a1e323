// Package testbed runs the real mooncake binary as N "hosts" on one
// machine: each host is a network namespace with its own address on a
// private /24 (10.250.<slot>.0/24), joined by veth pairs to a bridge that
// lives in a namespace of its own, and each process on it runs in its own
// UTS namespace with the host's name as hostname. The transfer engine
// decides "same host" (shared memory) from hostname + boot id, so two
// hosts of a bed always talk TCP over the veths, never shared memory.
//
// The driver (the test or `mooncake bench soak`) stays in the root
// namespace and reaches the hosts through one more veth, with the bed's
// address .254. Nothing else is routed: traffic stays between the bed's own
// addresses and loopback.
//
// Faults:
//   - Proc.Kill: kill -9 of one process; Proc.Freeze/Thaw: SIGSTOP/SIGCONT
//     (a process that stops answering with its sockets open).
//   - Bed.Partition/Heal: nftables drop rules, inside both hosts'
//     namespaces, between two hosts.
//   - Host.Isolate/Rejoin: the host drops every packet but loopback (a host
//     that stops answering without closing sockets).
//   - Host.LimitBandwidth: tc tbf on the host's egress.
//   - Bed.Forward: an app-level TCP forwarder on the driver's address that
//     adds delay and jitter (netem is not in every kernel); point a role's
//     peer address at the Link instead of the host.
//
// New needs root, ip (iproute2), nft (nftables), tc and unshare; ForTest
// skips the test with the reason when it cannot make namespaces, and
// removes everything (processes, namespaces, veths) at the test's cleanup,
// also when the test fails. A bed's slot (its /24 and names) is claimed by
// flock on a lock file in the temp dir, held until Close and released by
// the kernel if the process dies; what a dead owner left is swept by the
// next New.
//
// Lifecycle: New creates the namespaces (no goroutine outlives Close);
// Host.Start starts a process; Close kills every process and removes the
// namespaces.
package testbed
