// Package alloc is the offset allocator behind one store segment: it hands
// out aligned byte ranges of a fixed-size region and takes them back,
// coalescing neighbours, so that the master can pack objects into a segment
// at high utilisation (objects of one size fill a segment completely).
//
// Policy: best fit. The free extents are indexed by start, by end (for O(1)
// coalescing on Free) and by length (a sorted list of distinct lengths, each
// with a bucket of offsets), so Alloc finds the smallest extent that fits in
// O(log distinct-lengths) and an exact fit, the common case for KV cache
// blocks of one size, costs O(1). The allocator is deterministic and not safe
// for concurrent use; the master serialises calls.
package alloc
