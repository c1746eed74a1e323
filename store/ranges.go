package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvcache-go/mooncake/transfer"
)

// GetRanges copies byte ranges of key's value into dsts: dsts[i] gets
// len(dsts[i]) bytes from offset offs[i] of the value. The ranges are read
// in one transfer batch from one memory replica (this client's own first,
// then the others in turn), within the read lease, without copying the rest
// of the value: Mooncake's get_into_ranges, which EngramStore uses to gather
// embedding rows. dsts must lie in memory registered with the client
// (RegisterBuffer). A range outside the value is ErrInvalid. Unlike Get, a
// ranged read is not checked against the put's CRC32C (that covers the whole
// value), and copies held only by a disk tier are not read (ErrNoReplica).
func (c *Client) GetRanges(ctx context.Context, key string, offs []uint64, dsts [][]byte) error {
	if c.isClosed() {
		return ErrClosed
	}
	if len(offs) != len(dsts) {
		return fmt.Errorf("store: get ranges %q: %d offsets for %d buffers: %w", key, len(offs), len(dsts), ErrInvalid)
	}
	info, leaseEnd, err := c.replicaList(ctx, key)
	if err != nil {
		return err
	}
	for i, d := range dsts {
		if offs[i] > info.Size || uint64(len(d)) > info.Size-offs[i] {
			return fmt.Errorf("store: get ranges %q: range %d+%d outside a value of %d bytes: %w", key, offs[i], len(d), info.Size, ErrInvalid)
		}
	}
	var errs []error
	for _, r := range c.order(info.Replicas) {
		seg, err := c.mover.OpenSegment(ctx, r.Endpoint)
		if err != nil {
			errs = append(errs, fmt.Errorf("replica %s: %w: open segment: %w", r.Segment, ErrTransfer, err))
			continue
		}
		g := grantString(r.Grant)
		reqs := make([]transfer.Request, 0, len(dsts))
		for i, d := range dsts {
			if len(d) > 0 {
				reqs = append(reqs, transfer.Request{Op: transfer.OpRead, Local: transfer.AddrOf(d), Segment: seg,
					Remote: r.Addr + offs[i], Length: len(d), Grant: g})
			}
		}
		if len(reqs) == 0 {
			return nil
		}
		err = c.transferUntil(ctx, leaseEnd, reqs)
		if err == nil && c.clock.Now().After(leaseEnd) {
			err = ErrLeaseExpired // the space may have been reused while we read
		}
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrLeaseExpired) || !c.clock.Now().Before(leaseEnd) {
			return fmt.Errorf("store: get ranges %q: read from %s outlived the %dms lease: %w", key, r.Segment, info.LeaseTtlMs, ErrLeaseExpired)
		}
		errs = append(errs, fmt.Errorf("replica %s: %w: %w", r.Segment, ErrTransfer, err))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("store: get ranges %q: %w: %w", key, ErrNoReplica, errors.Join(errs...))
}
