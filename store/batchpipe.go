package store

import (
	"context"

	"github.com/kvcache-go/mooncake/transfer"
)

// Large batch reads in groups. A batch get reads every value, then checks
// each one's CRC32C: done one after the other, the checksums of a 16 MiB
// batch (~1.5 ms at ~10 GB/s) leave the lanes, and a disk tier reading
// ahead of them, idle at the end of every batch. With a Mover that
// submits asynchronously (*transfer.Engine), a batch of at least
// pipeMin bytes is cut, in order, into groups of about pipeGroup bytes,
// all submitted before the first is waited for, so each group's values
// are checked while the later ones are still on the wire. A group fails
// alone (its keys are read again one by one); a smaller batch, or a Mover
// without Submit, is one Transfer.

const (
	pipeMin   = 4 << 20
	pipeGroup = 2 << 20
)

// submitter is a Mover that starts a transfer and returns at once
// (*transfer.Engine).
type submitter interface {
	Submit(ctx context.Context, reqs []transfer.Request) (*transfer.Batch, error)
}

// transferChecked runs reqs (plain requests, one per value) and calls
// done(k, err) once for every request k, in order, as soon as the
// transfer that carried it ended: err is that transfer's error.
func (c *Client) transferChecked(ctx context.Context, reqs []transfer.Request, done func(k int, err error)) {
	total := 0
	for _, r := range reqs {
		total += r.Length
	}
	sub, ok := c.mover.(submitter)
	if !ok || total < pipeMin || len(reqs) < 2 {
		err := c.mover.Transfer(ctx, transfer.Coalesce(reqs, 0))
		for k := range reqs {
			done(k, err)
		}
		return
	}
	type group struct {
		from, to int
		b        *transfer.Batch
		err      error
	}
	var groups []group
	for from := 0; from < len(reqs); {
		to, n := from, 0
		for to < len(reqs) && (n < pipeGroup || to == from) {
			n += reqs[to].Length
			to++
		}
		g := group{from: from, to: to}
		g.b, g.err = sub.Submit(ctx, transfer.Coalesce(reqs[from:to], 0))
		groups = append(groups, g)
		from = to
	}
	for _, g := range groups {
		err := g.err
		if g.b != nil {
			err = g.b.Wait(ctx)
			g.b.Free()
		}
		for k := g.from; k < g.to; k++ {
			done(k, err)
		}
	}
}
