package store

import (
	"context"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/transfer"
)

// Batch gets of keys held only on disk: each disk copy the node's engine
// serves (DiskCopy.Addr) is one READ in the batch's transfer, next to the
// memory replicas' READs, so the copies on one node travel as one
// pipelined batch on its lanes and its disk tier reads them in parallel
// (one lane each). A copy without an address, or one whose READ or
// checksum fails, is read again one by one (readAny: the engine, then
// HTTP).

// diskRequest is the READ of in's first disk copy into buf through its
// node's engine; ok is false when it has none.
func (c *Client) diskRequest(ctx context.Context, in *pb.ObjectInfo, buf []byte) (transfer.Request, bool) {
	if len(in.Disk) == 0 || in.Disk[0].Addr == 0 || in.Disk[0].Endpoint == "" {
		return transfer.Request{}, false
	}
	d := in.Disk[0]
	seg, err := c.mover.OpenSegment(ctx, d.Endpoint)
	if err != nil {
		return transfer.Request{}, false
	}
	return transfer.Request{Op: transfer.OpRead, Local: transfer.AddrOf(buf), Segment: seg, Remote: d.Addr, Length: int(in.Size), Grant: string(d.Grant)}, true
}

// readFromDisk counts a value read whole from a disk copy (its CRC32C
// checked) and promotes it when the node asks.
func (c *Client) readFromDisk(key string, in *pb.ObjectInfo, v []byte) {
	c.diskReads.Add(1)
	if in.Promote {
		c.promote(key, in.Disk[0].Seq, v)
	}
}
