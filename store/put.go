package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/transfer"
)

// putRPC is the master's put calls as the put pipeline sees them, whatever
// transport carries them (fastMaster chooses it when the client is made).
type putRPC interface {
	// reserve allocates space for a new value of a key (PutStart).
	reserve(ctx context.Context, in *pb.PutStartRequest) (*pb.PutStartResponse, error)
	// commit ends a put (PutCommit). link is the connection the answer
	// came on, on which a slot it reserved may be written; nil when the
	// transport keeps no slots (then none was asked for).
	commit(ctx context.Context, in *pb.PutCommitRequest) (*pb.PutCommitResponse, putLink, error)
	// revoke abandons a reserved space (PutRevoke).
	revoke(ctx context.Context, in *pb.PutRevokeRequest) error
}

// putLink is the master connection a put slot came on.
type putLink interface {
	// live reports whether a slot that came on the link may still be
	// written: the master that reserved it is still the one answering.
	live() bool
}

// Put stores value under key with the default options. A put of an
// existing key fails with ErrExists.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	return c.PutWith(ctx, key, value, PutOptions{})
}

// PutWith stores value under key with the given options and returns after
// every replica is written and the object is visible.
func (c *Client) PutWith(ctx context.Context, key string, value []byte, o PutOptions) error {
	_, err := c.put(ctx, key, value, o, false)
	return err
}

// PutFrom stores src, which must lie inside memory registered with
// RegisterBuffer, without copying it into the staging buffer.
func (c *Client) PutFrom(ctx context.Context, key string, src []byte, o PutOptions) error {
	_, err := c.put(ctx, key, src, o, true)
	return err
}

// Upsert stores value under key, replacing any current value.
func (c *Client) Upsert(ctx context.Context, key string, value []byte) error {
	return c.PutWith(ctx, key, value, PutOptions{Upsert: true})
}

// putJob is one put going through the pipeline.
type putJob struct {
	key   string
	size  int
	crc   uint32
	o     PutOptions
	rc    *pb.ReplicateConfig
	slots bool // may take and ask for put slots (slot.go)
}

// space is where a put writes: the replicas the master reserved, for the
// key itself (slot "") or as a slot (slot.go).
type space struct {
	*pb.PutStartResponse
	slot string   // the slot's placeholder key ("" = the key's own put)
	held *putSlot // the slot taken (nil for PutStart's space): its record is reused for the next slot
}

// owner is the key the master keeps the reserved space under.
func (s space) owner(key string) string { return cmp.Or(s.slot, key) }

// put returns the number of replicas written. The pipeline: make the value
// transferable (source), reserve space (a slot an earlier put reserved, or
// PutStart), write the object header, when the master keeps them, and the
// value to every replica in one transfer batch (revoking the space when that
// fails), and commit with the value's CRC32C (PutCommit, which may also
// reserve a slot for the next put). A slot the master cannot use sends the
// put once more, without slots.
func (c *Client) put(ctx context.Context, key string, value []byte, o PutOptions, registered bool) (int, error) {
	if c.isClosed() {
		return 0, ErrClosed
	}
	if len(value) == 0 {
		return 0, fmt.Errorf("store: %w: empty value", ErrInvalid)
	}
	c.hotForget(key)
	src, room, release, err := c.source(ctx, key, value, registered)
	if err != nil {
		return 0, err
	}
	defer release()
	p := &putJob{key: key, size: len(value), crc: Checksum(value), o: o, rc: c.rcToPB(o), slots: slotEligible(len(value), o)}
	for {
		sp, err := c.reserveSpace(ctx, p)
		if err != nil {
			return 0, err
		}
		if err := c.writeObject(ctx, p, sp, src, room); err != nil {
			c.revoke(ctx, sp.owner(key))
			return 0, err
		}
		err = c.commitPut(ctx, p, sp)
		switch {
		case errors.Is(err, errSlotGone) && p.slots:
			p.slots = false // once more, the usual way
		case err != nil:
			return 0, err
		default:
			return len(sp.Replicas), nil
		}
	}
}

// reserveSpace takes a slot that fits the put, or asks the master for
// space with PutStart.
func (c *Client) reserveSpace(ctx context.Context, p *putJob) (space, error) {
	if p.slots {
		if sl := c.takeSlot(ctx, p.key, p.size, p.rc); sl != nil {
			return space{sl.resp, sl.key, sl}, nil
		}
	}
	resp, err := c.puts.reserve(ctx, &pb.PutStartRequest{ClientId: c.cfg.ClientID, Key: p.key, Size: uint64(p.size), Config: p.rc, Upsert: p.o.Upsert})
	if err != nil {
		return space{}, fmt.Errorf("store: put %q: master rpc: %w", p.key, err)
	}
	if err := statusErr(resp.Status); err != nil {
		return space{}, fmt.Errorf("store: put %q: %w", p.key, err)
	}
	return space{resp, "", nil}, nil
}

// writeObject writes the object header (when the master keeps them) and
// the value to every replica of sp in one transfer batch. room is the
// staged space in front of src kept for the header (see source).
func (c *Client) writeObject(ctx context.Context, p *putJob, sp space, src, room []byte) error {
	hdr, release, err := c.stageHeader(ctx, p.key, sp.PutStartResponse, p.size, p.crc, p.o, room)
	if err != nil {
		return err
	}
	defer release()
	if err := c.writeReplicas(ctx, src, sp.Replicas, hdr); err != nil {
		return fmt.Errorf("store: put %q: %w", p.key, err)
	}
	return nil
}

// commitPut makes the written space the key's object (PutCommit), keeping
// the slot the master reserved for the next put when it did. A slot the
// master refused has its header zeroed here. errSlotGone: make the put
// again the usual way.
func (c *Client) commitPut(ctx context.Context, p *putJob, sp space) error {
	req := &pb.PutCommitRequest{ClientId: c.cfg.ClientID, Key: p.key, Slot: sp.slot, Crc32C: p.crc, Config: p.rc, Upsert: p.o.Upsert}
	if p.slots && c.wantSlot() {
		req.ReserveSize, req.ReserveKeyLen = uint64(p.size), uint64(len(p.key))
	}
	sent := time.Now()
	resp, link, err := c.puts.commit(ctx, req)
	if err != nil {
		return fmt.Errorf("store: put %q: master rpc: %w", p.key, err)
	}
	c.zeroHeaders(ctx, sent, resp.Tombstones)
	if resp.SlotGone {
		return errSlotGone
	}
	if err := statusErr(resp.Status); err != nil {
		return fmt.Errorf("store: put %q: %w", p.key, err)
	}
	if resp.NextSlot != "" && resp.Next != nil {
		s := sp.held
		if s == nil {
			s = new(putSlot)
		}
		*s = putSlot{key: resp.NextSlot, resp: resp.Next, size: uint64(p.size), rc: p.rc, link: link, got: c.clock.Now()}
		c.keepSlot(ctx, s)
	}
	return nil
}

// revoke abandons a reserved space, even when ctx has ended (best effort).
func (c *Client) revoke(ctx context.Context, key string) {
	rctx, cancel := c.rpcCtx(context.WithoutCancel(ctx))
	defer cancel()
	_ = c.puts.revoke(rctx, &pb.PutRevokeRequest{ClientId: c.cfg.ClientID, Key: key})
}

// source returns registered memory holding value, and what to undo when
// the put is over: value itself when registered (by the caller, or here in
// place from directMin up), a registered private copy when it is too big
// for the staging buffer, or a piece of the staging buffer. room is the
// staged space right in front of src kept for a durable object header (nil
// when none), so that header and value go out in one write.
func (c *Client) source(ctx context.Context, key string, value []byte, registered bool) (src, room []byte, release func(), err error) {
	if registered {
		return value, nil, func() {}, nil
	}
	if len(value) >= directMin && c.mover.RegisterBytes(value, "cpu:0") == nil {
		return value, nil, func() { _ = c.mover.Unregister(transfer.AddrOf(value)) }, nil
	}
	if len(value) > len(c.stage.buf) {
		// Too big for the staging buffer and not registrable in place (the
		// same slice is being put concurrently): write from a private copy.
		cp := append([]byte(nil), value...)
		if err := c.mover.RegisterBytes(cp, "cpu:0"); err != nil {
			return nil, nil, nil, fmt.Errorf("store: put %q: register a copy of the value: %w", key, err)
		}
		return cp, nil, func() { _ = c.mover.Unregister(transfer.AddrOf(cp)) }, nil
	}
	n := 0
	if c.durable.Load() {
		n = int(c.headerLen(key)) // room for the header right in front of the value
	}
	st, err := c.stage.take(ctx, n+len(value))
	if errors.Is(err, ErrBufferTooSmall) && n > 0 {
		n = 0
		st, err = c.stage.take(ctx, len(value))
	}
	if errors.Is(err, ErrBufferTooSmall) {
		return nil, nil, nil, fmt.Errorf("store: value of %d bytes exceeds the staging buffer (%d): %w", len(value), len(c.stage.buf), err)
	} else if err != nil {
		return nil, nil, nil, err
	}
	copy(st[n:], value)
	return st[n:], st[:n:n], func() { c.stage.put(st) }, nil
}

// writeReplicas writes src, and the object header hdr when not nil, to
// every replica in one transfer batch.
func (c *Client) writeReplicas(ctx context.Context, src []byte, reps []*pb.Replica, hdr []byte) error {
	rp := reqPool.Get().(*[]transfer.Request)
	defer func() {
		clear(*rp) // no grant strings kept alive in the pool
		*rp = (*rp)[:0]
		reqPool.Put(rp)
	}()
	reqs := (*rp)[:0]
	for _, r := range reps {
		seg, err := c.mover.OpenSegment(ctx, r.Endpoint)
		if err != nil {
			return fmt.Errorf("%w: open segment %s: %w", ErrTransfer, r.Endpoint, err)
		}
		reqs = append(reqs, transfer.Request{Op: transfer.OpWrite, Local: transfer.AddrOf(src), Segment: seg, Remote: r.Addr, Length: len(src), Grant: grantString(r.Grant)})
	}
	if hdr != nil && transfer.AddrOf(hdr)+uintptr(len(hdr)) == transfer.AddrOf(src) {
		for i := range reqs { // header and value are adjacent: one write each
			reqs[i].Local, reqs[i].Remote, reqs[i].Length = transfer.AddrOf(hdr), reqs[i].Remote-uint64(len(hdr)), len(hdr)+len(src)
		}
	} else if hdr != nil {
		segs := make([]transfer.SegmentID, len(reps))
		for i := range reps {
			segs[i] = reqs[i].Segment
		}
		reqs = append(reqs, headerWrites(hdr, reps, segs)...)
	}
	*rp = reqs
	if err := c.mover.Transfer(ctx, reqs); err != nil {
		return fmt.Errorf("%w: write: %w", ErrTransfer, err)
	}
	return nil
}

// reqPool recycles the request lists of writeReplicas (Transfer copies
// the requests it takes; the list is free once it returns).
var reqPool = sync.Pool{New: func() any { return new([]transfer.Request) }}
