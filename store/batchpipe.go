package store

import (
	"context"

	"github.com/kvcache-go/mooncake/transfer"
)

// transferChecked runs reqs (plain requests, one per value) as one
// transfer, its runs of reads from one segment coalesced into
// scatter-gather requests, and calls done(k, err) once for every request
// k, in order, with the transfer's error.
//
// Cutting a large batch into groups submitted one after the other (so
// that each group's CRC32Cs are checked while the next is on the wire)
// was measured to lose every key after the first group of a 10,000-key
// batch over a slow link: the read deadline cut a group short, its lanes
// were reset, and the redial that every retry needs timed out behind the
// bytes the link was still draining (internal/userfail
// TestBatchGetSlowLinkKeepsLeases, long form). One transfer keeps the
// batch on the lanes it started on.
func (c *Client) transferChecked(ctx context.Context, reqs []transfer.Request, done func(k int, err error)) {
	err := c.mover.Transfer(ctx, transfer.Coalesce(reqs, 0))
	for k := range reqs {
		done(k, err)
	}
}
