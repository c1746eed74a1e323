// Package disktier is the disk tier behind a contributed store segment
// (Mooncake's root_fs_dir / SSD offload): the objects the master evicts
// from the segment are copied to one file each under a directory (header
// and value, checked against the value's CRC32C), kept within a capacity
// (least recently used dropped and reported), served to readers over HTTP
// (GET /disk/object?key=K&seq=S, on their own listener, never the transfer
// engine's path) and re-reported to the master when the tier is reopened on
// its directory. A Tier implements store.DiskTier; pass it as
// store.Config.Disk.
//
// Two users: storage nodes (`mooncake store --root-fs-dir DIR
// --enable-offload`, package internal/storenode) and store clients that
// contribute a segment through the Python binding (`setup(...,
// enable_ssd_offload=True, ssd_offload_path=DIR)`, package binding).
//
// Use: Listen(Config{Dir, Capacity, OffloadOnEvict, PromotionOnHit},
// "host:0") opens the tier and serves its reads; Close stops the server and
// releases the directory (an exclusive flock on DIR/.lock, so two tiers
// never share a directory). Open and Handler are the parts, for callers
// that serve the reads themselves.
package disktier
