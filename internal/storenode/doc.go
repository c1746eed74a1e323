// Package storenode is a store storage node: a process that contributes a
// memory segment to the store pool and serves it through its transfer
// engine. It opens a transfer engine, allocates the segment as
// engine-managed (memfd) memory so same-host clients can map it, mounts it
// at the master, keeps pinging (remounting after a master restart, when the
// master answers NEED_REMOUNT, and then re-reporting the durable objects its
// memory holds; its store client zeroes the headers of freed objects the
// master lists in ping answers), and on shutdown unmounts gracefully (the
// master stops allocating on the segment and waits for read leases on it to
// end, up to UnmountGrace) before freeing the memory.
//
// The segment is reserved, not used: a memfd that nothing populates, so a
// page is allocated by the first write to it and the node's memory tracks
// the bytes clients wrote, not SegmentSize. Same-host clients map it lazily
// (package internal/transport/shm), and the scan for durable objects at a
// remount reads only the parts ever written (objheader.ScanRanges).
//
// Clients never ask the node for data: they read and write the segment's
// memory directly with their own transfer engines, at the addresses the
// master hands out. The node's CPU only serves the transfer engine, and
// the copy and move tasks whose source replica it holds (its store client
// fetches them after each ping and writes the object from its memory to the
// target segments; see package store).
//
// With Config.RootFSDir and EnableOffload the node has a disk tier
// (package internal/disktier, Mooncake's root_fs_dir): objects the master evicts from its
// segment are copied to one file each (header and value, CRC-checked),
// served to readers over HTTP on their own listener (DiskAddr; never the
// transfer engine's path), kept within DiskCapacity (least recently used
// dropped), and re-reported when the node restarts on the directory.
//
// Use: Start(ctx, Config{Master, SegmentSize}) returns a mounted Node (it
// binds no port: the transfer engine listens, the node's HTTP API does not
// yet); Serve(ctx, ln) serves /health (503 after 3 failed pings) and
// /metrics on a listener the caller owns until ctx ends; Close unmounts
// gracefully. Run(ctx, cfg, ready) does all three around a context,
// listening on Config.HTTPAddr (the `mooncake store` command). Kill
// simulates a crash in tests (no unmount, no more pings: the master drops
// the node after its client TTL).
//
// Config.Engine.Grants (a grant.Verifier with the master's grant keys;
// `mooncake store --grant-key-file`) makes the node's transfer engine refuse
// every READ/WRITE of its segment that no master-signed grant covers; the
// counts are on /metrics (mooncake_storenode_grants_*,
// mooncake_storenode_transfers_denied_total).
package storenode
