// Package election makes the store master highly available with etcd, as
// Mooncake's `master --enable_ha` does: several master processes campaign
// for leadership of a cluster and only the leader runs a master. It is the
// server side; clients and storage nodes find the leader with package
// internal/leader, which also defines the view format used here. The store
// client never imports this package (nor the master it runs).
//
// # Election
//
// Each candidate (Server) holds an etcd session whose lease has a TTL
// (Config.LeaseTTL, 5s) and campaigns with etcd's election recipe
// (go.etcd.io/etcd/client/v3/concurrency) under the prefix
// leader.Key(cluster) = "mooncake-store/<cluster>/master_view": one key per
// candidate, bound to its lease, the oldest key leading. A candidate
// campaigns with the empty value; once it wins it starts a fresh
// master (internal/master, gRPC on Config.Master.Addr) and then proclaims
// its leader.View, "ADDR VERSION": the address clients dial (Config.Advertise
// host + the bound port) and the view version, the create revision of its
// key, which grows with every new leader. Readers take the empty value as
// "no serving leader yet", so nobody dials a leader before it listens.
//
// A follower does not listen on the master's gRPC address at all. The
// candidate's admin HTTP serves /health, /role (role, address, view) and
// /leader (the view read from etcd) always, and forwards the master's admin
// API (/metrics, /query_key, ...) while it leads; a follower answers those
// with 503 "not leader" (ErrNotLeader).
//
// # Life cycle
//
// New validates the configuration and does no I/O. Run(ctx, httpLn)
// connects to etcd, serves the admin API on httpLn (nil = none) and
// campaigns until ctx ends, then resigns (deletes its key) and revokes its
// lease, so a standby takes over at once. Start(cfg) is New plus a listener
// on Config.Master.HTTPAddr plus Run in the background; Close stops it as
// above, and Kill (tests) stops serving and stops refreshing the lease
// without resigning or revoking, as a crash does: a standby takes over when
// the lease expires. A leader whose session ends (lease expired or revoked,
// etcd unreachable past the TTL) closes its master and campaigns again with
// a new session; when it wins again it starts afresh and relearns the objects.
//
// # Guarantees
//
// A new leader starts with no objects and learns them from the storage
// nodes as they remount (durable metadata, master.Config.Durable: the nodes
// re-report what their memory holds); without it, objects written before a
// failover read as not found, never stale. A read in
// flight across a failover is verified against the CRC32C of its replica
// list. A partitioned old leader may notice the end of its lease slightly
// after etcd expired it; space handed out twice in that window shows up as
// a checksum error, never as wrong bytes.
//
// Tests start an embedded etcd with package internal/etcdtest.
package election
