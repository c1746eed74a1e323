// Package mooncakestore is Mooncake's Go binding of the store
// (mooncake-store/go in Mooncake's repository, package mooncakestore) over
// this project's store client, in pure Go: no cgo, no libmooncake.so.
//
// The module path is Mooncake's, github.com/kvcache-ai/Mooncake/mooncake-store/go,
// so a program written against Mooncake's binding builds unchanged with two
// replace directives in its go.mod (this module, and the project's module it
// is built on):
//
//	replace (
//		github.com/kvcache-ai/Mooncake/mooncake-store/go => /path/to/mooncake-go/binding/go
//		github.com/kvcache-go/mooncake => /path/to/mooncake-go
//	)
//
// then `go mod tidy` (or GOFLAGS=-mod=mod) fills in the requirements.
//
// # Behaviour
//
// Setup opens a transfer engine (P2P handshake; the metadata server argument
// is accepted and not needed: storage nodes are reached by their host:port
// segment names) and a store client that contributes globalSegmentSize bytes
// of memory to the pool. The protocol is "tcp" (also for "rdma", which falls
// back to TCP) or "shm"/"auto" (shared memory with same-host peers).
//
// The calls return Mooncake's sentinel errors (ErrPut, ErrGet, ...), wrapping
// the store's error so errors.Is(err, store.ErrNotFound) and the message tell
// the cause. As in Mooncake, a Put of a key that already exists succeeds and
// keeps the stored value. Batch calls return per-key results: 0 or the byte
// count on success, Mooncake's negative error code otherwise (-704 object not
// found, -200 no space, -600 invalid parameters, ...).
//
// PutFrom, GetInto and their batch forms take raw addresses (uintptr) as
// Mooncake's binding does; the memory must stay alive and unmoved during the
// call (Go heap memory is not moved by the garbage collector; keep a reference
// to the slice). Memory registered with RegisterBuffer is moved zero-copy.
//
// A Store is safe for concurrent use.
package mooncakestore
