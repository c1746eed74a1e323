package pdconnector

import "github.com/kvcache-go/mooncake/internal/bootstrap"

// KV load outcomes reported in the response's kv_transfer_params.kv_load.
const (
	LoadRemote     = "remote"     // pulled from prefill
	LoadLocal      = "local"      // full local prefix hit: nothing pulled
	LoadRecomputed = "recomputed" // pull failed, prefilled locally (policy recompute)
	LoadFailed     = "failed"     // pull failed, request failed (policy fail)
	LoadAborted    = "aborted"    // request ended while pulling
)

// PullSpec is one pull the consumer must run.
type PullSpec struct {
	ReqID      string
	TransferID string
	Bootstrap  string // prefill's bootstrap host:port
	EngineID   string // expected remote engine id ("" = any)
	NumTokens  int    // prompt length
	FirstBlock int    // first block index pulled
	BlockIDs   []int  // destination blocks for FirstBlock, FirstBlock+1, ...
	Contract   string // the params' contract (SGLang's resolves Bootstrap through GET /route)
}

// ReleaseSpec is a will-not-pull message for prefill.
type ReleaseSpec struct {
	Bootstrap  string
	TransferID string
}

type pullState int

const (
	pullQueued pullState = iota
	pullRunning
)

type consPull struct {
	spec    PullSpec
	state   pullState
	aborted bool
}

// LoadReport is what a decode request's response tells of its KV load
// (its kv_transfer_params; wire gives the JSON fields).
type LoadReport struct {
	TransferID string
	Load       string         // kv_load: LoadRemote, LoadLocal, ...
	Error      string         // kv_load_error: why the pull failed
	Bytes      int64          // pulled
	Nanos      int64          // ask to answer, decode's clock
	WriteNanos int64          // prefill's write time
	WriteReqs  int            // transfer requests prefill wrote
	TailNanos  int64          // prefill's write time after its prefill ended (streamed)
	Streamed   bool           // prefill streamed the KV layer by layer
	Aux        *bootstrap.Aux // prefill's first output token and its logprob
}

// FirstToken is prefill's first output token, when the pull succeeded and
// carried one.
func (r LoadReport) FirstToken() (bootstrap.Aux, bool) {
	if r.Load == LoadRemote && r.Aux != nil {
		return *r.Aux, true
	}
	return bootstrap.Aux{}, false
}

// ConsumerCore is the decode side's pure state machine: which requests pull
// which blocks, what finished, which blocks failed, and what to tell
// prefill. No I/O, no clock, not safe for concurrent use.
type ConsumerCore struct {
	blockSize int
	recompute bool
	pulls     map[string]*consPull
	queued    []PullSpec
	releases  []ReleaseSpec
	outcomes  map[string]LoadReport
	doneRecv  []string
	doneSend  []string
	invalid   []int
	counts    map[string]uint64
}

// NewConsumerCore returns a core for an engine with blockSize-token blocks;
// recompute tells it the engine's load failure policy (for reporting).
func NewConsumerCore(blockSize int, recompute bool) *ConsumerCore {
	return &ConsumerCore{blockSize: blockSize, recompute: recompute, pulls: map[string]*consPull{},
		outcomes: map[string]LoadReport{}, counts: map[string]uint64{}}
}

// Match answers GetNumNewMatchedTokens for a remote-prefill request with
// prompt length promptLen and numLocal tokens found in the local prefix
// cache.
func (c *ConsumerCore) Match(reqID string, promptLen, numLocal int) (int, bool) {
	if _, done := c.outcomes[reqID]; done {
		return 0, false // pulled (or failed) once already: recompute after preemption
	}
	remaining := promptLen - numLocal
	if remaining <= 1 {
		return 0, false // full hit: the last token is recomputed anyway
	}
	return remaining, true
}

// AfterAlloc records the pull of a remote-prefill request whose blocks are
// allocated. numLocal is its local hit (whole blocks); n the tokens
// promised by Match. With n == 0 (full hit) a release is queued instead.
func (c *ConsumerCore) AfterAlloc(reqID string, rp RemoteParams, promptLen, numLocal int, blockIDs []int, n int) {
	if _, done := c.outcomes[reqID]; done {
		return
	}
	if n == 0 {
		c.outcomes[reqID] = LoadReport{Load: LoadLocal}
		c.releases = append(c.releases, ReleaseSpec{Bootstrap: rp.Bootstrap, TransferID: rp.TransferID})
		c.counts["full_hit"]++
		return
	}
	first := numLocal / c.blockSize
	last := (promptLen + c.blockSize - 1) / c.blockSize
	if last > len(blockIDs) {
		last = len(blockIDs)
	}
	spec := PullSpec{ReqID: reqID, TransferID: rp.TransferID, Bootstrap: rp.Bootstrap, EngineID: rp.EngineID, Contract: rp.Contract,
		NumTokens: promptLen, FirstBlock: first, BlockIDs: append([]int(nil), blockIDs[first:last]...)}
	c.pulls[reqID] = &consPull{spec: spec}
	c.queued = append(c.queued, spec)
}

// TakeWork returns the pulls to start and releases to send, marking the
// pulls running.
func (c *ConsumerCore) TakeWork() ([]PullSpec, []ReleaseSpec) {
	q, r := c.queued, c.releases
	c.queued, c.releases = nil, nil
	for _, s := range q {
		if p := c.pulls[s.ReqID]; p != nil {
			p.state = pullRunning
		}
	}
	return q, r
}

// PullDone records the end of a pull. errMsg == "" means success; nanos is
// the whole pull (asking to answer), writeNanos prefill's write time.
func (c *ConsumerCore) PullDone(reqID string, errMsg string, bytes, nanos, writeNanos int64, writeReqs int) {
	p := c.pulls[reqID]
	if p == nil {
		return
	}
	delete(c.pulls, reqID)
	if p.aborted {
		// The engine already finished the request and kept its blocks for
		// us: now that prefill stopped writing they may be freed.
		c.doneSend = append(c.doneSend, reqID)
		c.counts["aborted"]++
		return
	}
	c.doneRecv = append(c.doneRecv, reqID)
	if errMsg == "" {
		c.outcomes[reqID] = LoadReport{Load: LoadRemote, Bytes: bytes, Nanos: nanos, WriteNanos: writeNanos, WriteReqs: writeReqs}
		c.counts["ok"]++
		return
	}
	c.invalid = append(c.invalid, p.spec.BlockIDs...)
	load := LoadFailed
	if c.recompute {
		load = LoadRecomputed
	}
	c.outcomes[reqID] = LoadReport{Load: load, Error: errMsg}
	c.counts["failed"]++
}

// SetAux records the aux data (prefill's first output token and its
// logprob) of a pulled request.
func (c *ConsumerCore) SetAux(reqID string, aux bootstrap.Aux) {
	if o, ok := c.outcomes[reqID]; ok {
		o.Aux = &aux
		c.outcomes[reqID] = o
	}
}

// SetStream records that prefill streamed reqID's KV layer by layer and how
// long its writes ran past the end of its prefill.
func (c *ConsumerCore) SetStream(reqID string, tailNanos int64) {
	if o, ok := c.outcomes[reqID]; ok {
		o.Streamed, o.TailNanos = true, tailNanos
		c.outcomes[reqID] = o
	}
}

// FirstToken is the first output token prefill shipped with reqID's KV, if
// the pull succeeded and carried one (the engine's FirstTokenSource).
func (c *ConsumerCore) FirstToken(reqID string) (bootstrap.Aux, bool) {
	return c.outcomes[reqID].FirstToken()
}

// Finished handles RequestFinished of a remote-prefill request. It
// returns whether the engine must keep the blocks (a pull is still writing
// into them), a release to send to prefill (or nil), and the report for the
// response.
func (c *ConsumerCore) Finished(reqID string, rp RemoteParams) (delayFree bool, rel *ReleaseSpec, rep LoadReport) {
	if p := c.pulls[reqID]; p != nil {
		rel = &ReleaseSpec{Bootstrap: rp.Bootstrap, TransferID: rp.TransferID}
		rep = LoadReport{TransferID: rp.TransferID, Load: LoadAborted}
		if p.state == pullQueued {
			delete(c.pulls, reqID)
			c.dropQueued(reqID)
			c.counts["aborted"]++
			return false, rel, rep
		}
		p.aborted = true
		return true, rel, rep
	}
	rep, had := c.outcomes[reqID]
	delete(c.outcomes, reqID)
	rep.TransferID = rp.TransferID
	if !had {
		// Finished before any match (rejected, aborted while waiting).
		rep.Load = LoadAborted
		return false, &ReleaseSpec{Bootstrap: rp.Bootstrap, TransferID: rp.TransferID}, rep
	}
	return false, nil, rep
}

func (c *ConsumerCore) dropQueued(reqID string) {
	for i, s := range c.queued {
		if s.ReqID == reqID {
			c.queued = append(c.queued[:i], c.queued[i+1:]...)
			return
		}
	}
}

// Drain returns and clears what the worker half reports for a step.
func (c *ConsumerCore) Drain() (doneSending, doneRecving []string, invalid []int) {
	a, b, i := c.doneSend, c.doneRecv, c.invalid
	c.doneSend, c.doneRecv, c.invalid = nil, nil, nil
	return a, b, i
}

// InFlight is the number of pulls queued or running.
func (c *ConsumerCore) InFlight() int { return len(c.pulls) }

// Count returns how many pulls ended with result (ok, failed, aborted,
// full_hit).
func (c *ConsumerCore) Count(result string) uint64 { return c.counts[result] }

// Poll counts pulls by SGLang's poll state: bootstrapping (queued: the
// prefill's registry not asked yet) and transferring (asked, not answered).
func (c *ConsumerCore) Poll() (bootstrapping, transferring int) {
	for _, p := range c.pulls {
		if p.state == pullQueued {
			bootstrapping++
		} else {
			transferring++
		}
	}
	return bootstrapping, transferring
}
