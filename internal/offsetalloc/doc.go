// Package offsetalloc is the offset allocator behind one store segment: it
// hands out aligned byte ranges of a fixed-size region and takes them back,
// coalescing neighbours, so that the master can pack objects into a segment
// at high utilisation (objects of one size fill a segment completely). The
// store client uses the same allocator to hand out pieces of its staging
// buffer. It is a leaf: it imports nothing of this module, so a program
// that links the store client does not link the master.
//
// Policy: best fit. The free extents are indexed by start, by end (for O(1)
// coalescing on Free) and by length (a sorted list of distinct lengths, each
// with a bucket of offsets), so Alloc finds the smallest extent that fits in
// O(log distinct-lengths) and an exact fit, the common case for KV cache
// blocks of one size, costs O(1). The allocator is deterministic and not safe
// for concurrent use; its users (the master core, the client's staging
// buffer) serialise calls.
package offsetalloc
