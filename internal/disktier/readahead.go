package disktier

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
	"github.com/kvcache-go/mooncake/transfer"
)

// Read-ahead. A transfer engine's lane serves its READ slices one at a
// time: it asks ReadAt for a slice, sends it, then asks for the next, so
// a tier that only read what it is asked would keep one request in the
// device's queue per lane and leave the disk idle while the lane sends.
// Instead the tier reads ahead what it will be asked for:
//
//   - Prefetch (transfer.Prefetcher): before a TCP lane serves a READ of
//     the tier's range it tells the tier that slice and the slices of the
//     READs queued behind it on the lane (a batch get's whole request, a
//     get's whole value), exactly, in the order they will be asked for.
//   - Without hints (a ReadAt of a slice nobody announced), the rest of
//     that slice's value, in slices of the same length.
//   - Speculatively, once the last slice of a value was announced (a
//     get's, or the latest in address order of a batch's): when the value
//     before it in address order was read within raStream (values put
//     and offloaded together, read together; a batch's values StoreBatch
//     addresses in the order they were put), the values after it, up to
//     raSpec bytes, queued behind everything announced, and in at most
//     half of raMax.
//
// Slices of one value that follow each other are read by one pread of up
// to readMax bytes (the engine cuts values into 256 KiB slices; the disk
// is read in requests as large as its sequential-read reference's), by at
// most ReadDepth reads at once, in the order they were announced (the
// first read of each announcement first: the slice a lane is about to
// serve, which its lane waits for, does not queue behind what other lanes
// announced further ahead), every announced read before the speculative
// ones (a read ahead of one reader's stream never delays another's get;
// one a lane then announces moves up among the announced). A ReadAt of a slice read ahead
// waits for that read instead of issuing its own and is served from its
// buffer, without a copy. At most raMax bytes are held ahead; slices
// nobody asks for within raStale are dropped.

const (
	raWindow = 8                      // slices read ahead of an unannounced ReadAt
	raStream = 200 * time.Millisecond // neighbours read within this are a stream
	raMax    = 64 << 20               // bytes held ahead (read or being read) at most
	raStale  = time.Second
	raChunks = 4096 // slices held ahead at most
	// raSpec is how far a stream is read ahead past what is announced:
	// ~10 ms of one client's gets at 1-2 GB/s, about how long a busy
	// machine may keep that client (or the tier's readers) off a CPU, so
	// the disk keeps reading meanwhile (measured on a loaded 2-core
	// machine, one client's single gets: lanes waited for the disk on 2%
	// of slices with 16 MiB, 5-8% with 4 MiB, ReadDepth reads of ReadSize).
	raSpec  = 16 << 20
	readMax = ReadSize
)

// ReadSize is the largest read ahead (bytes), ReadDepth how many run at
// once: the queue the tier keeps in its device (`mooncake bench
// store-disk` reads its disk's sequential reference with the same).
const (
	ReadSize  = 1 << 20
	ReadDepth = 4
)

type raKey struct{ addr, n uint64 }

// raRead is one pread of one or more consecutive slices of a value.
type raRead struct {
	done chan struct{} // closed when the read ended
	e    *diskEntry    // the value
	end  uint64        // the address after its last slice
	file string
	off  uint64 // file offset of its first byte
	n    uint64
	b    []byte // the bytes, once done (in buf)
	buf  []byte // the pooled buffer
	err  error
	// queued: in the queue, not started; spec: only read ahead of a
	// stream, nobody announced it yet (queued behind every announced
	// read). Both under raMu.
	queued, spec bool
	// refs counts the slices that hold the read: announced and not yet
	// taken, or taken and not yet released. The last puts buf back.
	refs atomic.Int32
}

// unref drops one slice's hold on r.
func (d *Tier) unref(r *raRead) {
	if r.refs.Add(-1) == 0 && r.buf != nil {
		d.bufs.put(r.buf)
	}
}

// raChunk is one slice read ahead: bytes [off, off+n) of its read.
// claims counts the announcements of it not yet taken (lanes of several
// readers of one value share the read), each holding a ref of the read; a
// slice read ahead unannounced holds one ref with no claim.
type raChunk struct {
	r      *raRead
	off    uint64
	at     time.Time
	claims int
}

// holds is how many refs of its read c holds.
func (c *raChunk) holds() int { return max(c.claims, 1) }

// takeAhead returns the slice [addr, addr+n) if it is read ahead (waiting
// for its read), removing it from the cache; the caller unrefs its read.
func (d *Tier) takeAhead(addr, n uint64) *raChunk {
	d.raMu.Lock()
	c := d.ra[raKey{addr, n}]
	if c != nil {
		if c.claims > 1 { // announced by another reader too: it keeps its claim
			c.claims--
		} else {
			delete(d.ra, raKey{addr, n})
			d.raBytes -= n
		}
	}
	d.raMu.Unlock()
	if c != nil {
		select {
		case <-c.r.done:
		default: // its read is still running: the lane waits for the disk
			t := time.Now()
			<-c.r.done
			d.laneWaits.Add(1)
			d.laneWaitNanos.Add(int64(time.Since(t)))
		}
	}
	return c
}

// Prefetch starts reading the slices a lane will ask for next
// (transfer.Prefetcher). Ranges that are not inside one value, or already
// read ahead, are skipped.
func (d *Tier) Prefetch(ranges []transfer.Range) {
	plan := make([]raKey, len(ranges))
	for i, r := range ranges {
		plan[i] = raKey{r.Addr, r.Len}
	}
	d.readAhead(plan, true, time.Now())
}

// aheadPlanLocked lists the slices after [addr, addr+n) of e to read
// ahead of an unannounced read: the rest of e, in slices of the same
// length (a whole slice's: the engine's slice size). Called with d.mu held.
func (d *Tier) aheadPlanLocked(e *diskEntry, addr, n uint64) []raKey {
	size := n
	switch {
	case addr+n < e.end():
		d.raSlice = n
	case addr != e.addr && d.raSlice != 0: // the short last slice of a value
		size = d.raSlice
	}
	var plan []raKey
	for a := addr + n; a < e.end() && len(plan) < raWindow; a += size {
		plan = append(plan, raKey{a, min(size, e.end()-a)})
	}
	return plan
}

// readAhead queues the reads of plan's slices that are inside one value
// and not read ahead yet, within raMax bytes, and drops stale slices. A
// slice that continues a queued read of its value (not started yet) joins
// it, up to readMax bytes: the slices of one value that lanes announce
// one by one, or several lanes each a part, are read together.
func (d *Tier) readAhead(plan []raKey, announced bool, now time.Time) {
	if len(plan) == 0 {
		return
	}
	d.mu.Lock()
	d.raMu.Lock()
	if now.Sub(d.raSwept) > raStale/4 { // a sweep at most four times a raStale
		d.raSwept = now
		for k, c := range d.ra {
			select {
			case <-c.r.done:
				if now.Sub(c.at) > raStale {
					delete(d.ra, k)
					d.raBytes -= k.n
					for range c.holds() {
						d.unref(c.r)
					}
					d.aheadDropped.Add(1)
				}
			default:
			}
		}
	}
	var (
		e      *diskEntry
		queued bool
		first  = true // the plan's first slice (its lane asks for it next)
	)
	// With no read ahead queued or running, the first slice is read on its
	// own, so that the lane sends it while the slices after it are read.
	idle := d.raReaders == 0 && len(d.raQueue) == 0
	add := func(k raKey, announced, spec bool) {
		if c := d.ra[k]; c != nil {
			switch {
			case announced && c.claims == 0: // read ahead unannounced: now claimed
				c.claims, c.at = 1, now
				d.promoteLocked(c.r, first)
			case announced: // a second reader of the slice shares the read
				c.claims++
				c.r.refs.Add(1)
				c.at = now
			}
			return
		}
		if k.n == 0 || k.addr+k.n < k.addr || d.raBytes+k.n > raMax || len(d.ra) >= raChunks {
			return
		}
		if e == nil || k.addr < e.addr || k.addr+k.n > e.end() {
			e = nil
			d.byAddr.DescendLessOrEqual(&diskEntry{addr: k.addr}, func(x *diskEntry) bool { e = x; return false })
			if e == nil || k.addr+k.n > e.end() {
				e = nil
				return
			}
		}
		if k.addr == e.addr {
			e.readAt = now
		}
		if k.addr+k.n < e.end() {
			d.raSlice = k.n
		}
		r := d.raTail[k.addr]
		if r != nil && (r.e != e || r.n+k.n > readMax) {
			r = nil
		}
		if r == nil {
			r = &raRead{done: make(chan struct{}), e: e, file: e.file, off: dataOffset(objheader.Len(e.hdr.Key)) + (k.addr - e.addr),
				queued: true, spec: spec}
			switch {
			case spec: // behind everything
				d.raQueue = append(d.raQueue, r)
			case queued: // behind the reads announced before
				d.raQueue = slices.Insert(d.raQueue, d.raFront, r)
				d.raFront++
			default:
				// The plan's first read is the one its lane waits for
				// next: it goes before the reads other lanes queued
				// further ahead of themselves.
				d.raQueue = slices.Insert(d.raQueue, 0, r)
				d.raFront++
			}
			queued = true
		} else {
			delete(d.raTail, k.addr)
			if !spec {
				d.promoteLocked(r, false)
			}
		}
		r.refs.Add(1)
		c := &raChunk{r: r, off: r.n, at: now}
		if announced {
			c.claims = 1
		}
		d.ra[k] = c
		d.raBytes += k.n
		r.n += k.n
		r.end = k.addr + k.n
		if idle {
			idle = false
			return // nothing joins it
		}
		d.raTail[r.end] = r
	}
	for _, k := range plan {
		add(k, announced, false)
		first = false
	}
	// A plan that holds the last slice of a value L (the latest in address
	// order, when several) whose neighbour before it in address order was
	// read within raStream (values offloaded together, read together: a
	// stream of gets, or a batch of keys in address order) reads the
	// values after L ahead too, after everything announced, up to raSpec
	// bytes past L, cut as the engine cuts a READ of each.
	if d.raSlice != 0 {
		var l, x *diskEntry
		for _, k := range plan {
			if x == nil || k.addr < x.addr || k.addr >= x.end() {
				x = nil
				d.byAddr.DescendLessOrEqual(&diskEntry{addr: k.addr}, func(y *diskEntry) bool { x = y; return false })
			}
			if x != nil && k.n != 0 && k.addr+k.n == x.end() && (l == nil || x.addr > l.addr) {
				l = x
			}
		}
		stream := false
		if l != nil {
			d.byAddr.DescendLessOrEqual(&diskEntry{addr: l.addr - 1}, func(p *diskEntry) bool {
				stream = now.Sub(p.readAt) < raStream
				return false
			})
		}
		if stream {
			var spec []raKey
			ahead := uint64(0)
			d.byAddr.AscendGreaterOrEqual(&diskEntry{addr: l.end()}, func(x *diskEntry) bool {
				for a := x.addr; a < x.end() && ahead < raSpec; a += d.raSlice {
					k := raKey{a, min(d.raSlice, x.end()-a)}
					spec = append(spec, k)
					ahead += k.n
				}
				return ahead < raSpec
			})
			for _, k := range spec {
				if d.ra[k] != nil {
					continue
				}
				if d.raBytes+k.n > raMax/2 { // the other half is kept for announced slices
					break
				}
				d.aheadSpec.Add(1)
				add(k, false, true)
			}
		}
	}
	if queued {
		for d.raReaders < ReadDepth && d.raReaders < len(d.raQueue) {
			d.raReaders++
			d.raWG.Go(d.reader)
		}
	}
	d.raMu.Unlock()
	d.mu.Unlock()
}

// promoteLocked moves r, a speculative read that a lane has now
// announced a slice of, from behind every announced read to the end of
// them (head: to the front of the queue, the read the lane waits for
// next), if it has not started. Called with raMu held.
func (d *Tier) promoteLocked(r *raRead, head bool) {
	if !r.spec {
		return
	}
	r.spec = false
	if !r.queued {
		return
	}
	i := slices.Index(d.raQueue[d.raFront:], r)
	if i < 0 {
		return
	}
	i += d.raFront
	to := d.raFront
	if head {
		to = 0
	}
	copy(d.raQueue[to+1:i+1], d.raQueue[to:i])
	d.raQueue[to] = r
	d.raFront++
}

// reader runs the queued reads ahead, oldest first, until none is left.
func (d *Tier) reader() {
	for {
		d.raMu.Lock()
		if len(d.raQueue) == 0 {
			d.raReaders--
			d.raMu.Unlock()
			return
		}
		r := d.raQueue[0]
		d.raQueue[0] = nil
		d.raQueue = d.raQueue[1:]
		if !r.spec {
			d.raFront--
		}
		r.queued = false
		if d.raTail[r.end] == r {
			delete(d.raTail, r.end) // started: nothing joins it any more
		}
		d.raMu.Unlock()
		t := time.Now()
		r.b, r.buf, r.err = d.readRange(r.file, r.off, r.n)
		d.aheadNanos.Add(int64(time.Since(t)))
		d.aheadReads.Add(1)
		close(r.done)
	}
}
