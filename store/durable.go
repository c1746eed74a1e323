package store

import (
	"context"
	"fmt"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/transfer"
)

// Durable metadata, client side (the master's Config.Durable; see
// internal/objheader and internal/master/restore.go):
//
//   - a put whose reserved space (PutStart's answer, or a slot's) carries a
//     header length writes the object's header (key, sequence number, size,
//     CRC32C, pins) at each replica's address minus that length, in the
//     same transfer batch as the value and before PutCommit;
//   - Remove, BatchRemove, RemoveByRegex and RemoveAll zero the headers the
//     master returns (the removed objects' and older versions') before
//     they return, so a removed object is never re-reported;
//   - a client contributing a segment zeroes the headers the master lists
//     in its ping answers (and says so in its next ping), and when it
//     remounts it scans its segment and reports the objects it holds, in
//     chunks of bounded size (remount.go).

// stageHeader stages the object header of a put into space resp of a
// durable master (nil when the master keeps no headers) and returns it
// with its release: in room, the staged space right in front of the value,
// when the header fits it, in a piece of the staging buffer otherwise.
func (c *Client) stageHeader(ctx context.Context, key string, resp *pb.PutStartResponse, size int, crc uint32, o PutOptions, room []byte) ([]byte, func(), error) {
	if resp.HeaderLen == 0 {
		return nil, func() {}, nil
	}
	c.durable.Store(true) // later puts stage room for their headers
	if p := c.keyPrefix.Load(); (p == nil && resp.KeyPrefix != "") || (p != nil && *p != resp.KeyPrefix) {
		c.keyPrefix.Store(&resp.KeyPrefix)
	}
	// The header names the key as the master stores it: behind its
	// tenant's namespace.
	if want := objheader.LenOf(len(resp.KeyPrefix) + len(key)); resp.HeaderLen != want {
		return nil, nil, fmt.Errorf("store: put %q: master header length %d, want %d", resp.KeyPrefix+key, resp.HeaderLen, want)
	}
	b, release := room, func() {}
	if uint64(len(room)) != resp.HeaderLen {
		var err error
		if b, err = c.stage.take(ctx, int(resp.HeaderLen)); err != nil {
			return nil, nil, fmt.Errorf("store: put %q: stage header: %w", key, err)
		}
		release = func() { c.stage.put(b) }
	}
	objheaderEncode(b, key, resp, size, crc, o)
	return b, release, nil
}

// headerLen is the length of key's header: key as the master stores it,
// behind the tenant namespace the master reported, if any.
func (c *Client) headerLen(key string) uint64 {
	n := len(key)
	if p := c.keyPrefix.Load(); p != nil {
		n += len(*p)
	}
	return objheader.LenOf(n)
}

func objheaderEncode(b []byte, key string, resp *pb.PutStartResponse, size int, crc uint32, o PutOptions) {
	objheader.EncodePrefixed(b, resp.KeyPrefix, objheader.Header{Key: key, Seq: resp.Seq, Size: uint64(size), CRC: crc,
		HardPin: o.HardPin, SoftPin: o.SoftPin, SoftPinTTL: o.SoftPinTTL})
}

// headerWrites are the transfer requests writing hdr in front of each replica.
func headerWrites(hdr []byte, reps []*pb.Replica, segs []transfer.SegmentID) []transfer.Request {
	if hdr == nil {
		return nil
	}
	reqs := make([]transfer.Request, len(reps))
	for i, r := range reps {
		reqs[i] = transfer.Request{Op: transfer.OpWrite, Local: transfer.AddrOf(hdr), Segment: segs[i], Remote: r.Addr - uint64(len(hdr)), Length: len(hdr), Grant: grantString(r.Grant)}
	}
	return reqs
}

// zeroHeaders zeroes the given headers (tombstones named in the answer to
// a call sent at sent) with one transfer batch, within
// objheader.ZeroWithin of sent: the writes are blind, and past that the
// master may hand the bytes out again. A failure or a write given up is
// logged: the owning node zeroes them too when its ping brings them.
func (c *Client) zeroHeaders(ctx context.Context, sent time.Time, refs []*pb.HeaderRef) {
	if len(refs) == 0 {
		return
	}
	if c.beforeZero != nil {
		c.beforeZero(refs)
	}
	ctx, cancel := context.WithDeadline(ctx, sent.Add(objheader.ZeroWithin))
	defer cancel()
	zero, err := c.stage.take(ctx, objheader.Align)
	if err != nil {
		c.log.Warn("store: zero removed headers", "err", err)
		return
	}
	defer c.stage.put(zero)
	clear(zero)
	reqs := make([]transfer.Request, 0, len(refs))
	for _, r := range refs {
		seg, err := c.mover.OpenSegment(ctx, r.Endpoint)
		if err != nil {
			c.log.Warn("store: zero removed header", "segment", r.Endpoint, "err", err)
			continue
		}
		reqs = append(reqs, transfer.Request{Op: transfer.OpWrite, Local: transfer.AddrOf(zero), Segment: seg, Remote: r.Addr, Length: len(zero), Grant: grantString(r.Grant)})
	}
	if err := c.mover.Transfer(ctx, reqs); err != nil {
		c.log.Warn("store: zero removed headers", "n", len(reqs), "err", err)
	}
}

// zeroOwn zeroes tombstones in this client's own segment and queues them
// to be reported in the next ping.
func (c *Client) zeroOwn(refs []*pb.HeaderRef) {
	if len(refs) == 0 || c.segmentSpec == nil {
		return
	}
	var done []*pb.HeaderRef
	offloaded := c.offloadAll(refs) // copy to disk before the headers go
	for _, r := range refs {
		if r.Segment != c.segmentSpec.Name || r.Offset+objheader.Align > uint64(len(c.segment)) {
			continue
		}
		objheader.Clear(c.segment[r.Offset:], r.Seq)
		done = append(done, r)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.zeroed = append(c.zeroed, done...)
	c.onDisk = append(c.onDisk, offloaded...)
}

// takeZeroed returns the tombstones zeroed since the last ping.
func (c *Client) takeZeroed() []*pb.HeaderRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	z := c.zeroed
	c.zeroed = nil
	return z
}

// requeueZeroed puts back tombstones a failed ping did not report.
func (c *Client) requeueZeroed(z []*pb.HeaderRef) {
	if len(z) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.zeroed = append(z, c.zeroed...)
}

// dataRanger is a Mover that tells which parts of a managed buffer were
// written (transfer.Engine.ManagedDataRanges).
type dataRanger interface {
	ManagedDataRanges(b []byte) ([][2]int, error)
}

// segmentData is the part of the contributed segment a scan for headers
// reads: the ranges written so far when the segment is managed memory
// (reading the rest of a memfd would allocate every page of it), the whole
// segment otherwise.
func (c *Client) segmentData() [][2]int {
	if m, ok := c.mover.(dataRanger); ok && c.cfg.Segment == nil {
		if rs, err := m.ManagedDataRanges(c.segment); err == nil {
			return rs
		}
	}
	return [][2]int{{0, len(c.segment)}}
}

// held starts the scan of the contributed segment for the durable objects
// it holds, its disk copies after them; the caller closes it.
func (c *Client) held() *scanSource {
	if c.segmentSpec == nil {
		return startScan(nil, nil, "", remountPiece, scanAhead, nil)
	}
	var disk []*pb.HeldObject
	if c.cfg.Disk != nil {
		disk = c.diskHeld(c.cfg.Disk.Held())
	}
	return startScan(c.segment, c.segmentData(), c.segmentSpec.Name, remountPiece, scanAhead, disk)
}
