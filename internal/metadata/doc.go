// Package metadata is where transfer engines publish and find segment
// descriptors when they do not use the P2P handshake.
//
// Two backends behind one small interface (Get/Put/Delete/Close, ErrNotFound
// when a key is absent), chosen by Open from a URI:
//
//   - "http://h:p/metadata": Mooncake's HTTP metadata contract. GET, PUT and
//     DELETE on /metadata?key=<urlencoded key>; 200 on success, 404 when the
//     key is absent; GET /health answers 200 "OK". Server implements it (in
//     memory), and `mooncake metadata-server --port N` runs it. The client uses Mooncake's timeouts
//     (1.5 s to connect, 3 s per request).
//   - "etcd://h:p[,h:p...]": a real etcd cluster through the official client
//     (go.etcd.io/etcd/client/v3); tests run an embedded etcd.
//
// Keys are Mooncake's: mooncake/ram/<segment> holds a segment's JSON
// descriptor (package wire).
package metadata
