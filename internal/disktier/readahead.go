package disktier

import (
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
)

// Read-ahead. A transfer engine's lane serves its READ slices one at a
// time: it asks ReadAt for a slice, sends it, then asks for the next, so
// a tier that only read what it is asked would keep one request in the
// device's queue per lane and leave the disk idle while the lane sends.
// Instead, each ReadAt starts reads of the slices that follow it (the
// same length, at the same offsets from each value's start as the
// engine cuts them): the rest of the value, and, when the value before it
// in address order was read within raStream (a batch get of values
// offloaded together), the values after it, up to raWindow slices ahead
// and raMax bytes held. A later ReadAt of a slice read ahead waits for
// that read instead of issuing its own. Slices nobody asks for within
// raStale are dropped.

const (
	raWindow = 8
	raMax    = 64 << 20
	raStream = 200 * time.Millisecond
	raStale  = time.Second
	raChunks = 4096 // slices held ahead at most
)

type raKey struct{ addr, n uint64 }

// raChunk is one slice read ahead.
type raChunk struct {
	done chan struct{} // closed when the read ended
	b    []byte        // the bytes (in buf)
	buf  []byte        // the pooled buffer
	err  error
	at   time.Time
}

// takeAhead returns the slice [addr, addr+n) if it was read ahead (waiting
// for its read), removing it from the cache.
func (d *Tier) takeAhead(addr, n uint64) *raChunk {
	d.raMu.Lock()
	c := d.ra[raKey{addr, n}]
	if c != nil {
		delete(d.ra, raKey{addr, n})
		d.raBytes -= n
	}
	d.raMu.Unlock()
	if c != nil {
		<-c.done
	}
	return c
}

// aheadPlan lists the slices after [addr, addr+n) of e to read ahead: the
// rest of e, then the values after it when e's predecessor was read
// recently. Called with d.mu held.
func (d *Tier) aheadPlanLocked(e *diskEntry, addr, n uint64, now time.Time) []raKey {
	size := n // a full slice (the engine's slice size) or a whole value
	switch {
	case addr+n < e.end():
		d.raSlice = n
	case addr != e.addr && d.raSlice != 0: // the short last slice of a value
		size = d.raSlice
	}
	var plan []raKey
	add := func(x *diskEntry, from uint64) bool {
		for a := from; a < x.end() && len(plan) < raWindow; a += size {
			plan = append(plan, raKey{a, min(size, x.end()-a)})
		}
		return len(plan) < raWindow
	}
	if !add(e, addr+n) {
		return plan
	}
	stream := false
	d.byAddr.DescendLessOrEqual(&diskEntry{addr: e.addr - 1}, func(p *diskEntry) bool {
		stream = p != e && now.Sub(p.readAt) < raStream
		return false
	})
	if !stream {
		return plan
	}
	d.byAddr.AscendGreaterOrEqual(&diskEntry{addr: e.end()}, func(x *diskEntry) bool { return add(x, x.addr) })
	return plan
}

// readAhead starts the reads of plan that are not cached or running yet,
// within raMax bytes, and drops stale slices.
func (d *Tier) readAhead(plan []raKey, now time.Time) {
	if len(plan) == 0 {
		return
	}
	type job struct {
		k    raKey
		c    *raChunk
		file string
		off  uint64
	}
	var jobs []job
	d.mu.Lock()
	d.raMu.Lock()
	if now.Sub(d.raSwept) > raStale/4 { // a sweep at most four times a raStale
		d.raSwept = now
		for k, c := range d.ra {
			select {
			case <-c.done:
				if now.Sub(c.at) > raStale {
					delete(d.ra, k)
					d.raBytes -= k.n
					if c.buf != nil {
						d.bufs.put(c.buf)
					}
				}
			default:
			}
		}
	}
	for _, k := range plan {
		if d.ra[k] != nil || d.raBytes+k.n > raMax || len(d.ra) >= raChunks {
			continue
		}
		var e *diskEntry
		d.byAddr.DescendLessOrEqual(&diskEntry{addr: k.addr}, func(x *diskEntry) bool { e = x; return false })
		if e == nil || k.addr+k.n > e.end() {
			continue
		}
		c := &raChunk{done: make(chan struct{}), at: now}
		d.ra[k] = c
		d.raBytes += k.n
		jobs = append(jobs, job{k, c, e.file, dataOffset(objheader.Len(e.hdr.Key)) + (k.addr - e.addr)})
	}
	d.raMu.Unlock()
	d.mu.Unlock()
	for _, j := range jobs {
		d.raWG.Go(func() {
			j.c.b, j.c.buf, j.c.err = d.readRange(j.file, j.off, j.k.n)
			close(j.c.done)
		})
	}
}
