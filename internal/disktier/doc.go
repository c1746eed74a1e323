// Package disktier is the disk tier behind a contributed store segment
// (Mooncake's root_fs_dir / SSD offload): the objects the master evicts
// from the segment are copied to one file each under a directory (header
// and value, checked against the value's CRC32C), kept within a capacity
// (least recently used dropped and reported), served to readers through
// the transfer engine, and re-reported to the master when the tier is
// reopened on its directory. A Tier implements store.DiskTier,
// store.DiskSource and store.DiskBatchStore; pass it as store.Config.Disk.
//
// Layout: one file per version of a key, named by the first 16 bytes of
// the key's SHA-256 and the version; the object's header (package
// objheader) in the first block(s), the value from the next 4 KiB
// boundary, so direct reads of the value are aligned. Capacity counts file
// bytes.
//
// I/O (io.go): direct I/O (O_DIRECT) where the file system takes it,
// buffered otherwise (Config.Buffered forces it); StoreBatch writes up to
// WriteDepth files at once, each under its own name; reads are read ahead
// (readahead.go): the engine's TCP lanes announce the slices they will
// ask for (Prefetch, a transfer.Prefetcher), which the tier reads in that
// order, ReadDepth reads at once, the consecutive slices of a value in
// one read of up to ReadSize, and serves from the read's buffer, on
// descriptors kept open for the files read last (fdcache.go). io.go says
// why parallel pread/pwrite rather than io_uring, with the measurements.
//
// Reads: every value has an address in the tier's range (Region, above
// 2^62: never memory), in offload order (the values of one StoreBatch in
// the order they were put, so a stream read back in put order is in
// address order and read ahead), new at every reopen. The store
// client registers the range with its transfer engine as a
// transfer.Source and reports each copy's address to the master; readers
// READ [addr, addr+size) of the node's segment as they read a memory
// replica, on the same lanes, and the lane serving them calls ReadAt. The
// reader checks the value's CRC32C against the master's, end to end.
// Readers without an address (or whose engine read fails short of a
// checksum mismatch) use the HTTP server (Handler: GET
// /disk/object?key=K&seq=S, sendfile).
//
// Two users: storage nodes (`mooncake store --root-fs-dir DIR
// --enable-offload`, package internal/storenode) and store clients that
// contribute a segment through the Python binding (`setup(...,
// enable_ssd_offload=True, ssd_offload_path=DIR)`, package binding).
//
// Use: Listen(Config{Dir, Capacity, OffloadOnEvict, PromotionOnHit},
// "host:0") opens the tier and serves its HTTP reads; Close stops the
// server and releases the directory (an exclusive flock on DIR/.lock, so
// two tiers never share a directory). Open and Handler are the parts, for
// callers that serve the reads themselves. `mooncake bench store-disk`
// measures the tier against its disk.
package disktier
