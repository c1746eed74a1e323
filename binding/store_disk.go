package main

/*
#include <stdint.h>
*/
import "C"

import (
	"net"
	"time"

	"github.com/kvcache-go/mooncake/internal/disktier"
)

// This file is SSD offload for the segment a Python client contributes
// (Mooncake's setup(..., enable_ssd_offload=True, ssd_offload_path=DIR)):
// the storage node's disk tier (package internal/disktier) behind the
// client's own segment, so objects the master evicts from it go to files
// under DIR and are read back (and promoted) as a node's are.

// diskPingInterval is the ping period of a client with a disk tier. An
// object the master offloads from our segment keeps its memory until the
// client has copied it to disk and reported that, two pings later; pinging
// often frees that memory sooner, so fewer evictions have to be made while a
// put waits for room (those are dropped, not offloaded).
const diskPingInterval = 100 * time.Millisecond

// diskArgs is the SSD offload part of setup (JSON from Python).
type diskArgs struct {
	Dir            string `json:"dir"`              // "" = no disk tier
	Capacity       uint64 `json:"capacity"`         // bytes (0 = the tier's default)
	OffloadOnEvict bool   `json:"offload_on_evict"` // evictions from our segment go to disk
	PromotionOnHit bool   `json:"promotion_on_hit"` // readers put values read from disk back into memory
}

// openDiskTier opens the disk tier of a setup with SSD offload and serves
// its reads on host (a free port); nil when the setup has none. A client
// that contributes no segment has nothing to offload: the option is
// refused rather than silently ignored.
func openDiskTier(a storeArgs, host string) (*disktier.Server, error) {
	if a.disk.Dir == "" {
		return nil, nil
	}
	if a.segmentSize == 0 {
		return nil, errInvalid("SSD offload needs a global segment (global_segment_size > 0): only a contributed segment is offloaded")
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return disktier.Listen(disktier.Config{Dir: a.disk.Dir, Capacity: a.disk.Capacity,
		OffloadOnEvict: a.disk.OffloadOnEvict, PromotionOnHit: a.disk.PromotionOnHit}, net.JoinHostPort(host, "0"))
}

func closeDisk(d *disktier.Server) {
	if d != nil {
		if err := d.Close(); err != nil {
			logger.Warn("store: close disk tier", "err", err)
		}
	}
}

// diskReads is the number of values this client read from disk tiers (0
// for a dummy client, whose reads its real client makes).
func (s *storeState) diskReads() int64 {
	if c, ok := s.c.(interface{ DiskReads() uint64 }); ok {
		return int64(c.DiskReads())
	}
	return 0
}

// mc_store_disk_reads is get_offload_rpc_read_count.
//
//export mc_store_disk_reads
func mc_store_disk_reads(h C.int64_t) C.int64_t {
	return withStore(h, "disk read count", func(s *storeState) (int64, error) {
		return s.diskReads(), nil
	})
}
