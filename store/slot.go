package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	"github.com/kvcache-go/mooncake/internal/objheader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// Put slots (see internal/master/slot.go): when a small put ends over the
// fast path, the master also reserves space for the client's next put of
// the same size, key length and policy. That put writes into the slot and
// commits it with one call instead of PutStart + PutEnd: one master round
// trip per put. A slot is used only on the fastrpc connection it came on
// (a master restart ends it, and the new master does not know the slot),
// and only within slotMaxAge; the master refuses a commit whose slot is
// older than a version of the key (the put is then made the usual way).

// slotMaxAge bounds how long a slot is used (the master frees unfinished
// puts, slots included, only after PutReleaseTimeout, 10 min by default).
const slotMaxAge = 10 * time.Second

// maxSlots bounds the slots a client holds (one per concurrent put).
const maxSlots = 8

// errSlotGone: the slot could not take the put; make it the usual way.
var errSlotGone = errors.New("store: put slot gone")

type putSlot struct {
	key  string               // the master's placeholder key
	resp *pb.PutStartResponse // replicas, sequence number, header length
	size uint64               // value size it was reserved for
	rc   *pb.ReplicateConfig  // policy it was reserved with
	conn *fastrpc.Client      // the connection it came on
	got  time.Time
}

// slotEligible reports whether a put may use or reserve a slot: a small
// value with no placement or promotion wishes.
func slotEligible(size int, o PutOptions) bool {
	return size < directMin && o.promoteSeq == 0 && len(o.PreferredSegments) == 0 && !o.PreferLocal
}

// takeSlot removes and returns a slot that fits a put of key, size and rc,
// nil when none does. Slots too old or from a dead connection are dropped.
func (c *Client) takeSlot(ctx context.Context, key string, size int, rc *pb.ReplicateConfig) *putSlot {
	c.slotMu.Lock()
	var stale []*putSlot
	var got *putSlot
	var checked *fastrpc.Client // slots mostly share one connection: check it once
	var live bool
	current := func(conn *fastrpc.Client) bool {
		if conn != checked {
			checked, live = conn, c.fast.current(conn)
		}
		return live
	}
	c.slots = slices.DeleteFunc(c.slots, func(s *putSlot) bool {
		switch {
		case got != nil:
			return false
		case time.Since(s.got) > slotMaxAge:
			stale = append(stale, s)
			return true
		case !current(s.conn):
			return true // the master behind it is gone, and so is the slot
		case s.size == uint64(size) && sameRC(s.rc, rc) && (s.resp.HeaderLen == 0 || s.resp.HeaderLen == objheader.Len(key)):
			got = s
			return true
		}
		return false
	})
	c.slotMu.Unlock()
	for _, s := range stale {
		c.revoke(ctx, s.key)
	}
	return got
}

// sameRC compares the policies of slot-eligible puts (no preferred
// segments, no promotion) without reflection.
func sameRC(a, b *pb.ReplicateConfig) bool {
	return a.GetReplicas() == b.GetReplicas() && a.GetSoftPin() == b.GetSoftPin() && a.GetSoftPinTtlMs() == b.GetSoftPinTtlMs() &&
		a.GetHardPin() == b.GetHardPin() && a.GetPromoteSeq() == b.GetPromoteSeq() &&
		len(a.GetPreferredSegments()) == 0 && len(b.GetPreferredSegments()) == 0
}

// keepSlot stores a slot the master reserved, or gives it back when the
// client holds enough.
func (c *Client) keepSlot(ctx context.Context, s *putSlot) {
	c.slotMu.Lock()
	full := len(c.slots) >= maxSlots || c.isClosed()
	if !full {
		c.slots = append(c.slots, s)
	}
	c.slotMu.Unlock()
	if full {
		c.revoke(ctx, s.key)
	}
}

// wantSlot reports whether a commit should ask for a slot.
func (c *Client) wantSlot() bool {
	c.slotMu.Lock()
	defer c.slotMu.Unlock()
	return len(c.slots) < maxSlots
}

// commit ends a put over the fast path: the key's own put in progress
// (slot nil) or the slot written. handled is false when the fast path could
// not carry it (the caller ends the put over gRPC, or, with a slot, makes
// the put again the usual way). A slot refused by the key's rules has its
// header zeroed here. errSlotGone: make the put again the usual way.
func (c *Client) commit(ctx context.Context, key string, sl *putSlot, crc uint32, size int, rc *pb.ReplicateConfig, upsert bool) (handled bool, err error) {
	req := &pb.PutCommitRequest{ClientId: c.cfg.ClientID, Key: key, Crc32C: crc, Config: rc, Upsert: upsert}
	if sl != nil {
		req.Slot = sl.key
	}
	if c.wantSlot() {
		req.ReserveSize, req.ReserveKeyLen = uint64(size), uint64(len(key))
	}
	// A hot call: fastMaster bounds it by RPCTimeout itself.
	resp, conn, err := c.fast.putCommit(ctx, req)
	if conn == nil {
		if sl != nil {
			return true, errSlotGone
		}
		return false, nil
	}
	if err != nil {
		return true, err
	}
	c.zeroHeaders(ctx, resp.Tombstones)
	if resp.SlotGone {
		return true, errSlotGone
	}
	if err := statusErr(resp.Status); err != nil {
		return true, err
	}
	if resp.NextSlot != "" && resp.Next != nil {
		c.keepSlot(ctx, &putSlot{key: resp.NextSlot, resp: resp.Next, size: uint64(size), rc: rc, conn: conn, got: time.Now()})
	}
	return true, nil
}

// dropSlots gives the held slots back (Close).
func (c *Client) dropSlots(ctx context.Context) {
	c.slotMu.Lock()
	slots := c.slots
	c.slots = nil
	c.slotMu.Unlock()
	for _, s := range slots {
		if c.fast.current(s.conn) {
			c.revoke(ctx, s.key)
		}
	}
}
