// Package dummyclient lets several processes on one host share one store
// client: Mooncake's "real client" (`mooncake client`) and its "dummy
// clients" (MooncakeDistributedStore.setup_dummy).
//
// The real client owns the memory: its store client contributes the global
// segment to the pool and holds the staging buffer, and for every dummy
// client that attaches it creates a shared-memory pool (a memfd of the size
// the dummy asks for), registers it with its transfer engine and hands the
// file descriptor to the dummy over the socket (SCM_RIGHTS). The dummy maps
// the same pages: alloc_from_mem_pool hands out addresses inside it, and a
// put or get whose buffer lies inside the pool moves the data between the
// pool and the storage nodes with no copy in either process (the request
// carries only an offset). Other memory travels inline in the request or
// the reply.
//
// Protocol: a unix stream socket in the abstract namespace named after the
// real client's address (SocketName), so a dummy given "127.0.0.1:50052"
// finds the real client serving that address on the same host. Each
// request and reply is a frame: u32 header length, u64 data length (little
// endian), a JSON header, then the data. A connection is one dummy client;
// its requests are served in order. The first request is "attach" (pool
// size); the reply's data is one byte sent with the pool's descriptor.
// Errors carry Mooncake's numeric code and the name of the store sentinel,
// and the Client rebuilds an error that matches the same sentinel.
//
// Who is at the other end (peer.go): the abstract namespace has no file
// permissions, so each side reads the other's user id from the kernel
// (SO_PEERCRED). The real client serves dummies of its own user, root and
// Config.AllowUIDs (a dummy acts with its credentials); a dummy talks to a
// real client of its own user, root and $MOONCAKE_REAL_CLIENT_UIDS (the
// real client receives its values). A refused peer gets ErrPeerNotAllowed.
//
// Server (New + Run(ctx), or Serve(ctx, listener)) serves any Backend (a
// *store.Client); Client (Dial) has the store client's methods the Python
// binding uses, so the binding drives a dummy like a real store client.
package dummyclient
