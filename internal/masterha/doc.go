// Package masterha makes the store master highly available with etcd, as
// Mooncake's `master --enable_ha` does: several master processes campaign
// for leadership of a cluster, only the leader runs a master, and clients
// and storage nodes find the leader through etcd.
//
// # Election
//
// Each candidate (Server, started with Start) holds an etcd session whose
// lease has a TTL (Config.LeaseTTL, 5s) and campaigns with etcd's election
// recipe (go.etcd.io/etcd/client/v3/concurrency) under the prefix
// Key(cluster) = "mooncake-store/<cluster>/master_view": one key per
// candidate, bound to its lease, the oldest key leading. A candidate
// campaigns with the empty value; once it wins it starts a fresh, empty
// master (internal/master, gRPC on Config.Master.Addr) and then proclaims
// its View, "ADDR VERSION": the address clients dial (Config.Advertise host
// + the bound port) and the view version, the create revision of its key,
// which grows with every new leader. Readers take the empty value as "no
// serving leader yet", so nobody dials a leader before it listens.
//
// A follower does not listen on the master's gRPC address at all. The
// candidate's admin HTTP (Config.Master.HTTPAddr) always serves /health,
// /role (role, address, view) and /leader (the view read from etcd), and
// forwards the master's admin API (/metrics, /query_key, ...) while it
// leads; a follower answers those with 503 "not leader".
//
// Close resigns (deletes the key) and revokes the lease, so a standby takes
// over at once. Kill (tests) stops serving and stops refreshing the lease
// without either, as a crash does: a standby takes over when the lease
// expires. A leader whose session ends (lease expired or revoked, etcd
// unreachable past the TTL) closes its master and campaigns again with a
// new session; when it wins again it starts empty.
//
// # Clients
//
// A master address "etcd://h1:2379;h2:2379[/CLUSTER]" (ParseTarget; ";" or
// "," between endpoints, cluster DefaultCluster when omitted) is turned by
// DialTarget into a gRPC target with a resolver of its own (passed per
// connection, not registered globally). The resolver reads the election
// prefix, picks the leader (Leader: lowest create revision, value parsed by
// ParseView and checked against the key's revision), then watches the
// prefix and reads again on every change and whenever gRPC reports a failed
// connection (ResolveNow). While there is no leader it keeps the last
// address, so wait-for-ready calls wait for the next leader within their
// deadline. The store client (package store) uses DialTarget for every
// master address; a plain host:port is dialled unchanged. The rest of
// failover is the store's existing restart handling: the new leader does
// not know the client, answers its next ping with NEED_REMOUNT, and the
// client remounts its segments.
//
// # Guarantees
//
// A new leader has no objects (there is no op-log replication), so objects
// written before a failover read as not found, never stale. A read in
// flight across a failover is verified against the CRC32C of its replica
// list. A partitioned old leader may notice the end of its lease slightly
// after etcd expired it; space handed out twice in that window shows up as
// a checksum error, never as wrong bytes.
//
// Package etcdtest starts an embedded etcd for tests (free loopback ports,
// short raft ticks so that 1 s leases work).
package masterha
