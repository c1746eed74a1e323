package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// Put slots (see internal/master/slot.go) are a way to reserve space: when
// a small put commits over the fast path, the master also reserves space
// for the client's next put of the same size, key length and policy. That
// put writes into the slot and commits it, with no PutStart: one master
// round trip per put. A slot is written only while the connection it came
// on is live (a master restart ends it, and the new master does not know
// the slot), and only within slotMaxAge; the master refuses a commit whose
// slot is older than a version of the key (the put is then made the usual
// way).

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
	link putLink              // the connection it came on
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
	var checked putLink // slots mostly share one connection: check it once
	var live bool
	current := func(l putLink) bool {
		if l != checked {
			checked, live = l, l.live()
		}
		return live
	}
	now := c.clock.Now()
	c.slots = slices.DeleteFunc(c.slots, func(s *putSlot) bool {
		switch {
		case got != nil:
			return false
		case now.Sub(s.got) > slotMaxAge:
			stale = append(stale, s)
			return true
		case !current(s.link):
			return true // the master behind it is gone, and so is the slot
		case s.size == uint64(size) && sameRC(s.rc, rc) && (s.resp.HeaderLen == 0 || s.resp.HeaderLen == objheader.Len(s.resp.KeyPrefix+key)):
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
// client holds enough (or it came on no link to write it over).
func (c *Client) keepSlot(ctx context.Context, s *putSlot) {
	c.slotMu.Lock()
	full := len(c.slots) >= maxSlots || c.isClosed() || s.link == nil
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

// dropSlots gives the held slots back (Close).
func (c *Client) dropSlots(ctx context.Context) {
	c.slotMu.Lock()
	slots := c.slots
	c.slots = nil
	c.slotMu.Unlock()
	for _, s := range slots {
		if s.link.live() {
			c.revoke(ctx, s.key)
		}
	}
}
