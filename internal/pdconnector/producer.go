package pdconnector

import (
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
)

// Free reasons counted by ProducerCore.
const (
	FreeDone     = "done"     // decode pulled (or the push failed and decode was answered)
	FreeReleased = "released" // decode said it will not pull (abort, full hit, client gone)
	FreeTimeout  = "timeout"  // nobody asked within AbortTimeout
)

// PullState is what ProducerCore.StartPull says about a transfer.
type PullState int

// Pull states.
const (
	PullReady  PullState = iota // blocks are ready: the caller pushes now (entry marked pushing)
	PullWait                    // prefill not finished yet: wait on the returned channel
	PullFailed                  // prefill of that transfer failed or was aborted
	PullBusy                    // another pull of the same transfer is running
	PullGone                    // released or timed out already
)

type prodEntry struct {
	reqID     string
	blocks    []int
	numTokens int
	ready     bool
	failed    bool
	pushing   bool
	released  bool // release arrived while pushing: free when the push ends
	deadline  time.Time
	readyCh   chan struct{}  // closed when ready or failed
	aux       *bootstrap.Aux // the first output token prefill sampled, its logprob
	held      bool           // the engine keeps the blocks until DrainDoneSending names reqID
	waited    bool           // a pull waits for this prefill (StartPull answered PullWait)

	// Layer-wise streaming (stream.go): the prompt's progress per layer,
	// known from the engine's steps, and the decode it streams to.
	table       []int // the request's block table (latest step)
	promptLen   int
	stepEnd     int   // tokens computed once this step's forward ends
	layerTokens []int // per layer: leading prompt tokens whose KV is in the cache
	readyAt     time.Time
	stream      *stream // attached pull, nil before one arrived
}

// ProducerCore is the prefill side's pure state machine: per transfer_id, the
// blocks of a finished prefill waiting for decode's pull. It does no I/O and
// reads no clock; it is not safe for concurrent use (the connector holds a
// mutex around it).
//
// Life of a transfer: Finished (prefill done, blocks delay-freed) ->
// StartPull (PullReady: caller pushes) -> PushDone (freed, reason done).
// Release frees at once (or after the running push). Tick frees entries
// whose AbortTimeout passed with no pull. A pull that arrives before the
// prefill finished gets PullWait and a channel closed on Finished.
type ProducerCore struct {
	abortTimeout time.Duration
	layers       int // layer-wise streaming when > 0 (EnableStreaming)
	blockSize    int
	entries      map[string]*prodEntry
	tombstones   map[string]time.Time // released before prefill finished -> expiry
	gone         map[string]time.Time // freed transfers, for clear answers -> expiry
	doneSending  []string
	freed        map[string]uint64
}

// NewProducerCore returns a core that frees unpulled blocks after abortTimeout.
func NewProducerCore(abortTimeout time.Duration) *ProducerCore {
	return &ProducerCore{abortTimeout: abortTimeout, entries: map[string]*prodEntry{},
		tombstones: map[string]time.Time{}, gone: map[string]time.Time{}, freed: map[string]uint64{}}
}

func (p *ProducerCore) entry(tid string, now time.Time) *prodEntry {
	e := p.entries[tid]
	if e == nil {
		e = &prodEntry{readyCh: make(chan struct{}), deadline: now.Add(p.abortTimeout)}
		p.entries[tid] = e
	}
	return e
}

// Finished records that the prefill request reqID of transfer tid ended.
// ok means its whole prompt's KV is computed (blocks cover numTokens
// tokens). It returns whether the engine must keep the blocks (delay free)
// until the request appears in DrainDoneSending.
func (p *ProducerCore) Finished(tid, reqID string, blocks []int, numTokens int, ok bool, now time.Time) bool {
	if _, g := p.gone[tid]; g {
		return false // its stream ended (released, failed, timed out) before the prefill did
	}
	if _, dead := p.tombstones[tid]; dead {
		delete(p.tombstones, tid)
		p.gone[tid] = now.Add(p.abortTimeout)
		if ok {
			p.freed[FreeReleased]++
		}
		return false
	}
	e := p.entry(tid, now)
	if e.ready || e.failed {
		return false // a second request with the same transfer id: do not hold it
	}
	e.reqID, e.numTokens = reqID, numTokens
	e.deadline = now.Add(p.abortTimeout)
	if e.stream != nil {
		return p.finishStreamed(e, blocks, numTokens, ok, now)
	}
	if !ok {
		e.failed = true
		close(e.readyCh)
		return false
	}
	e.blocks = append([]int(nil), blocks...)
	e.ready, e.held, e.readyAt = true, true, now
	close(e.readyCh)
	if p.Streaming() {
		// Every layer is computed: a pull that attaches later sends it all.
		p.computedAll(e, blocks, numTokens)
	}
	return true
}

// SetAux records the first output token the prefill of tid sampled and its
// logprob (aux data, shipped with the blocks).
func (p *ProducerCore) SetAux(tid string, aux bootstrap.Aux) {
	if e := p.entries[tid]; e != nil && e.ready {
		e.aux = &aux
	}
}

// Aux is the aux data of tid, if any.
func (p *ProducerCore) Aux(tid string) (bootstrap.Aux, bool) {
	if e := p.entries[tid]; e != nil && e.aux != nil {
		return *e.aux, true
	}
	return bootstrap.Aux{}, false
}

// StartPull is called when decode asks for transfer tid. With PullReady the
// returned blocks and token count are the prefill's, and the entry is
// marked pushing until PushDone. With PullWait, wait on ch (bounded) and
// call StartPull again.
func (p *ProducerCore) StartPull(tid string, now time.Time) (st PullState, blocks []int, numTokens int, ch <-chan struct{}) {
	if _, dead := p.gone[tid]; dead {
		return PullGone, nil, 0, nil
	}
	if _, dead := p.tombstones[tid]; dead {
		return PullGone, nil, 0, nil
	}
	e := p.entry(tid, now)
	switch {
	case e.failed:
		return PullFailed, nil, 0, nil
	case e.pushing:
		return PullBusy, nil, 0, nil
	case e.ready:
		e.pushing = true
		return PullReady, e.blocks, e.numTokens, nil
	}
	e.waited = true
	return PullWait, nil, 0, e.readyCh
}

// PushDone ends the push of tid (successful or not): its blocks are freed.
func (p *ProducerCore) PushDone(tid string, now time.Time) {
	e := p.entries[tid]
	if e == nil || !e.pushing {
		return
	}
	reason := FreeDone
	if e.released {
		reason = FreeReleased
	}
	if !e.held && e.released {
		// A stream released before its prefill finished: Finished frees
		// (and counts) it at once.
		delete(p.entries, tid)
		p.tombstones[tid] = now.Add(p.abortTimeout)
		return
	}
	p.free(tid, e, reason, now)
}

func (p *ProducerCore) free(tid string, e *prodEntry, reason string, now time.Time) {
	delete(p.entries, tid)
	p.gone[tid] = now.Add(p.abortTimeout)
	if e.held {
		p.doneSending = append(p.doneSending, e.reqID)
		p.freed[reason]++
	}
}

// Release records that decode will not pull tid. It returns (known,
// pushing): a pushing transfer is freed when its push ends (the caller
// should cancel the push); a transfer whose prefill has not finished yet is
// remembered so that Finished frees it at once.
func (p *ProducerCore) Release(tid string, now time.Time) (known, pushing bool) {
	e := p.entries[tid]
	if e == nil {
		if _, g := p.gone[tid]; g {
			return true, false
		}
		p.tombstones[tid] = now.Add(p.abortTimeout)
		return false, false
	}
	if e.pushing {
		e.released = true
		if e.stream != nil {
			e.stream.poke()
		}
		return true, true
	}
	if e.ready {
		p.free(tid, e, FreeReleased, now)
		return true, false
	}
	// Not finished yet (a pull may be waiting): Finished will free it.
	delete(p.entries, tid)
	if !e.failed {
		close(e.readyCh) // wake waiting pulls: they will see PullGone
	}
	p.tombstones[tid] = now.Add(p.abortTimeout)
	return true, false
}

// Tick frees ready transfers nobody pulled within AbortTimeout and forgets
// expired records. It returns how many were freed by timeout.
func (p *ProducerCore) Tick(now time.Time) int {
	n := 0
	for tid, e := range p.entries {
		if e.pushing || now.Before(e.deadline) {
			continue
		}
		if e.ready {
			p.free(tid, e, FreeTimeout, now)
			n++
			continue
		}
		delete(p.entries, tid) // a pull that waited for a prefill that never came, or a failed one
		if !e.failed {
			close(e.readyCh)
		}
	}
	for tid, exp := range p.tombstones {
		if !now.Before(exp) {
			delete(p.tombstones, tid)
		}
	}
	for tid, exp := range p.gone {
		if !now.Before(exp) {
			delete(p.gone, tid)
		}
	}
	return n
}

// DrainDoneSending returns the request ids whose blocks may be freed now.
func (p *ProducerCore) DrainDoneSending() []string {
	d := p.doneSending
	p.doneSending = nil
	return d
}

// Held is the number of finished prefills whose blocks are still held.
func (p *ProducerCore) Held() int {
	n := 0
	for _, e := range p.entries {
		if e.held {
			n++
		}
	}
	return n
}

// Freed returns how many transfers were freed for reason.
func (p *ProducerCore) Freed(reason string) uint64 { return p.freed[reason] }

// Poll counts transfers by SGLang's poll state: bootstrapping (a pull waits
// for a prefill not finished yet), waiting for input (prefill done, no pull
// yet), transferring (pushing).
func (p *ProducerCore) Poll() (bootstrapping, waiting, transferring int) {
	for _, e := range p.entries {
		switch {
		case e.pushing:
			transferring++
		case e.ready:
			waiting++
		case !e.failed && e.waited:
			bootstrapping++
		}
	}
	return bootstrapping, waiting, transferring
}
