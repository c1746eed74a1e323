// Package hotcache is the pure core of the store client's hot cache
// (Mooncake's local hot cache): values of hot keys kept in this process's
// memory, so that a get of a hot key (a system prompt's KV blocks, shared
// by many requests) copies from local memory instead of reading a remote
// node.
//
// The core holds values and decides which to keep; it does not decide
// whether a value it holds is current. Every entry carries the Version it
// was read at (the master's incarnation, the put's sequence number and the
// CRC32C); the store client asks the master, on each get, whether that
// version is still the key's current one, and serves the entry only when it
// is (store/hotcache.go). A stale entry is therefore never served, whatever
// this package keeps; invalidation here (Remove, RemoveIf, Clear) only frees
// memory early.
//
// # Bounded memory
//
// Config.Capacity bounds the bytes of the values held (keys and bookkeeping
// are not counted: a few dozen bytes an entry). Values larger than
// Config.MaxEntry are never admitted. Eviction is least recently used,
// filtered by frequency (below).
//
// # Admission by frequency
//
// Every lookup records one access of its key in a count-min sketch (depth
// 4, 8-bit counters, Config.SketchWidth counters a row) behind a doorkeeper
// (a bloom filter that absorbs the first access of each key, so one-hit
// keys never reach the sketch): TinyLFU. A value is admitted only when its
// key's estimated count reaches Config.Threshold (Mooncake's
// MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD, default 2), and, when room must
// be made, only if every entry it would evict is estimated colder than it
// (a tie keeps the entry held, so keys of equal popularity do not churn). All
// counters are halved, and the doorkeeper cleared, after width x depth
// recorded accesses, so old popularity fades.
//
// The core does no I/O, starts no goroutine and reads no clock. All methods
// are safe for concurrent use: one mutex guards the index and the sketch;
// values are immutable once offered and copied by callers outside the lock.
package hotcache
