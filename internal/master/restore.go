package master

import (
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
)

// Durable metadata (Config.Durable).
//
// Every durable allocation starts with an objheader that the client writes
// with the value before PutEnd, so the storage node's memory describes the
// objects it holds. When a node remounts on a master that does not know it
// (a restart or a new HA leader) it scans its segment and reports what it
// found; the master rebuilds the segment's allocator and objects from the
// reports. Nothing is added to the put path's RPCs.
//
// The reports travel in chunks of bounded size through a restore session
// (restore_session.go: RestoreBegin, RestoreChunk, RestoreEnd; Restore runs
// a whole one), so that neither a message nor a hold of the master's lock
// grows with the number of objects a node holds. Each segment's reports
// arrive in offset order (the order of the node's scan), and the master
// decides them as they come:
//
//   - a report that is malformed, outside the segment or behind what the
//     session already decided is dropped;
//   - of two overlapping reports the one with the higher sequence number
//     wins (in offset order a report can only overlap the last one kept,
//     across chunk boundaries too);
//   - the winner becomes a complete object, or one more replica of it,
//     unless the master knows a newer version of the key (put or
//     re-reported with a higher sequence number, or removed or evicted
//     during the restore window); a newer report replaces an older
//     version, which is freed;
//   - the first Align bytes of each refused report lying in free space
//     stay allocated as a tombstone that the node zeroes.
//
// The allocator is built as the reports are decided, in O(1) per report:
// the bytes past the last decided offset are free in it, fenced off by
// one allocated Align block, and a segment being restored takes no new
// objects (placement, copy and move targets, tombstone reuse skip it)
// until the session ends. Its restored objects are complete at once:
// readable, removable and evictable while the restore goes on.
//
// A freed durable object must not come back: its header is zeroed before
// its first bytes can be reused. Freeing releases the value's bytes at once
// but keeps the header's first Align bytes allocated as a tombstone until
// the owning node reports (Heartbeat) that it zeroed them; Remove also
// returns the tombstones of the removed keys so that the removing client
// zeroes them itself before its remove returns. The remover's writes are
// blind, so a tombstone named to one stays allocated for
// objheader.ZeroFence after that, even once zeroed (tombs.go).

// tomb is a freed durable object whose header is not yet known to be zeroed.
type tomb struct {
	key string
	seq uint64
	// alias: a key whose older version's header may lie here too (a
	// reused put slot, slot.go), indexed under it as well.
	alias string
	n     uint64 // bytes held: Align, or the whole object while it is offloaded; 0: the bytes are a live slot's (held, slot.go)
	off   bool   // being copied to the node's disk tier before zeroing
	// named: when an answer last named it to a client to zero (0: never);
	// its bytes stay allocated until objheader.ZeroFence after that.
	named nanotime
	// hold: under Config.Scrub, until when a put's write grant may cover
	// its bytes (grantHoldLocked; 0: none).
	hold nanotime
}

// HeaderRef names the header of a durable object in a segment.
type HeaderRef struct {
	Segment  string
	Endpoint string // transfer engine segment holding the memory
	Offset   uint64 // offset of the header in the segment
	Addr     uint64 // remote address of the header (segment base + Offset)
	Seq      uint64
	Offload  bool // copy the object to the disk tier before zeroing
}

// HeldObject is an object a storage node found in its segment
// (objheader.Scan) and reports when it remounts.
type HeldObject struct {
	Segment    string
	Offset     uint64 // of its header in the segment
	Key        string
	Size       uint64
	CRC        uint32
	Seq        uint64
	HardPin    bool
	SoftPin    bool
	SoftPinTTL time.Duration
	Disk       bool // held by the node's disk tier (Offset unused)
}

// RestoreResult says what a restore call did with the reported objects.
// The results of a session's calls add up: a call that replaces a version
// an earlier call of the session took over counts it as dropped again (its
// Restored can be negative).
type RestoreResult struct {
	Restored   int         // replicas taken over
	Dropped    int         // reports refused (older versions, overlaps, removed keys, bad)
	Tombstones []HeaderRef // headers of refused objects the node must zero
}

func (r *RestoreResult) add(o RestoreResult) {
	r.Restored += o.Restored
	r.Dropped += o.Dropped
	r.Tombstones = append(r.Tombstones, o.Tombstones...)
}

func headerLen(key string) uint64 { return objheader.Len(key) }
