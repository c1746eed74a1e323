// Package leader is the client side of the store master's high
// availability: the format of the master_view key the elected master
// publishes in etcd, and the gRPC resolver that follows it. It imports the
// etcd client only (go.etcd.io/etcd/client/v3), never the etcd server nor
// the master, so the store client (package store) can link it cheaply. The
// server side, the candidates that campaign and the leader that serves, is
// package internal/election.
//
// # The view
//
// Candidates campaign under the prefix Key(cluster) =
// "mooncake-store/<cluster>/master_view": one key per candidate, bound to
// its etcd lease, the oldest key (lowest create revision) leading. The
// leader's value is its View, "ADDR VERSION" (View.String, ParseView): the
// address clients dial and the view version, the create revision of its
// key, which grows with every new leader. The empty value is what a
// candidate writes while campaigning: it means "no serving leader yet"
// (ErrNoLeader), so nobody dials a leader before it listens. Leader picks
// the leader among the keys read (Candidate) and checks its version against
// the key's revision (ErrBadView otherwise); ReadLeader does the etcd read.
//
// # Addresses and the resolver
//
// A master address "etcd://h1:2379;h2:2379[/CLUSTER]" (ParseTarget; ";" or
// "," between endpoints, cluster DefaultCluster when omitted; ErrBadTarget
// when malformed) is turned by DialTarget into a gRPC target with a
// resolver of its own (passed per connection, not registered globally). The
// resolver reads the election prefix, picks the leader, then watches the
// prefix and reads again on every change and whenever gRPC reports a failed
// connection (ResolveNow). While there is no leader it keeps the last
// address, so wait-for-ready calls wait for the next leader within their
// deadline. A plain host:port is dialled unchanged. The store client uses
// DialTarget for every master address; the rest of failover is the store's
// restart handling: the new leader does not know the client, answers its
// next ping with NEED_REMOUNT, and the client remounts its segments.
package leader
