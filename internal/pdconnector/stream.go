package pdconnector

import (
	"slices"
	"time"
)

// Layer-wise streaming, the ProducerCore's share (pure: no I/O, no clock).
//
// With streaming on (EnableStreaming), the core follows each prefill
// request that will be pulled (a transfer id) through the engine's steps:
// Scheduled (once per step, before the forward) says which prompt tokens the
// step computes, LayerDone (after each layer's attention) that the layer's
// KV of those tokens is in the cache. Once decode's pull arrived (Attach:
// decode's destination blocks), every layer's newly complete blocks are
// queued as a LayerWrite as soon as that layer is done, and the pull's
// pusher takes them (Next) and writes them while the next layers compute.
// A block is complete in a layer when all its tokens are computed in that
// layer (the prompt's last, partial block when the whole prompt is); a
// complete block is never written again by the engine, so it can be sent
// while the request runs. The pull is answered once the prefill finished
// and every layer of every block decode asked for was written.
//
// Blocks stay valid while a write may read them: a streamed request's
// blocks are held by the engine until its pusher ended (Finished delays the
// free of an attached entry whatever the outcome; PushDone frees). A
// request preempted mid-stream (its blocks freed and reused by the engine)
// breaks its stream: the pull is answered failed and decode recomputes.

// LayerWrite is one piece of a stream: copy layer Layer of prefill's blocks
// Src[i] to decode's blocks Dst[i].
type LayerWrite struct {
	Layer    int
	Src, Dst []int
}

// StreamState is what Next tells a stream's pusher.
type StreamState int

// Stream states.
const (
	StreamWrite    StreamState = iota // write the returned pieces, then call Next again
	StreamIdle                        // nothing to write yet: wait on Attach's channel
	StreamDone                        // the whole prompt is written: answer done
	StreamFailed                      // the prefill failed or was aborted: answer prefill_failed
	StreamBroken                      // the prefill was preempted mid-stream: answer failed
	StreamReleased                    // decode released the transfer (or it is gone): stop
)

func (s StreamState) String() string {
	return [...]string{"write", "idle", "done", "failed", "broken", "released"}[s]
}

// stream is an attached pull: decode's destination and what was queued.
type stream struct {
	first     int   // first prompt block decode lacks
	dst       []int // decode's block for prompt block first+i
	numTokens int   // decode's prompt length
	sent      []int // per layer: prompt blocks [first, sent[l]) queued
	queue     []LayerWrite
	broken    bool
	wake      chan struct{} // capacity 1: something changed
}

func (s *stream) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// EnableStreaming turns layer-wise streaming on, for an engine of
// numLayers layers and blocks of blockSize tokens.
func (p *ProducerCore) EnableStreaming(numLayers, blockSize int) {
	p.layers, p.blockSize = numLayers, blockSize
}

// Streaming reports whether layer-wise streaming is on.
func (p *ProducerCore) Streaming() bool { return p.layers > 0 }

// Scheduled records that this step computes prompt tokens [start, end) of
// transfer tid's prefill request reqID (a promptLen-token prompt in the
// blocks of table). Tokens before start are computed in every layer
// already (prefix-cache hit, earlier chunks).
func (p *ProducerCore) Scheduled(tid, reqID string, table []int, start, end, promptLen int, now time.Time) {
	if !p.Streaming() || p.ended(tid) {
		return
	}
	e := p.entry(tid, now)
	if e.ready || e.failed {
		return
	}
	e.reqID, e.promptLen, e.stepEnd = reqID, promptLen, end
	e.table = append(e.table[:0], table...)
	if e.layerTokens == nil {
		e.layerTokens = make([]int, p.layers)
	}
	for l := range e.layerTokens {
		e.layerTokens[l] = max(e.layerTokens[l], start)
	}
}

// ended reports whether tid was freed or released already.
func (p *ProducerCore) ended(tid string) bool {
	_, g := p.gone[tid]
	_, t := p.tombstones[tid]
	return g || t
}

// LayerDone records that layer's KV of this step's tokens of tid is in the
// cache. With a pull attached it queues the layer's newly complete blocks
// and reports whether it did (the pusher is woken).
func (p *ProducerCore) LayerDone(tid string, layer int) bool {
	e := p.entries[tid]
	if e == nil || e.ready || e.failed || e.layerTokens == nil || layer < 0 || layer >= len(e.layerTokens) {
		return false
	}
	e.layerTokens[layer] = max(e.layerTokens[layer], e.stepEnd)
	return p.queueLayer(e, layer)
}

// complete is the number of leading prompt blocks fully computed when
// tokens prompt tokens are.
func (p *ProducerCore) complete(e *prodEntry, tokens int) int {
	if e.promptLen > 0 && tokens >= e.promptLen {
		return (e.promptLen + p.blockSize - 1) / p.blockSize
	}
	return tokens / p.blockSize
}

// queueLayer queues layer l's blocks that are complete and not queued yet.
func (p *ProducerCore) queueLayer(e *prodEntry, l int) bool {
	s := e.stream
	if s == nil || s.broken || e.released || e.failed {
		return false
	}
	hi := min(p.complete(e, e.layerTokens[l]), s.first+len(s.dst), len(e.table))
	if hi <= s.sent[l] {
		return false
	}
	s.queue = append(s.queue, LayerWrite{Layer: l, Src: slices.Clone(e.table[s.sent[l]:hi]),
		Dst: slices.Clone(s.dst[s.sent[l]-s.first : hi-s.first])})
	s.sent[l] = hi
	s.poke()
	return true
}

// Attach starts streaming transfer tid to a decode that lacks prompt blocks
// first, first+1, ... (its blocks dst) of a numTokens-token prompt: the
// layers computed so far are queued at once, the others as they finish.
// With PullReady the caller is the stream's pusher: it loops on Next,
// waiting on ch when idle, and ends with PushDone. The other states are
// StartPull's.
func (p *ProducerCore) Attach(tid string, first int, dst []int, numTokens int, now time.Time) (st PullState, ch <-chan struct{}) {
	if p.ended(tid) {
		return PullGone, nil
	}
	e := p.entry(tid, now)
	switch {
	case e.failed:
		return PullFailed, nil
	case e.pushing:
		return PullBusy, nil
	}
	e.pushing = true
	s := &stream{first: first, dst: slices.Clone(dst), numTokens: numTokens, sent: make([]int, p.layers),
		wake: make(chan struct{}, 1)}
	for l := range s.sent {
		s.sent[l] = first
	}
	e.stream = s
	if e.layerTokens == nil {
		e.layerTokens = make([]int, p.layers)
	}
	for l := range e.layerTokens {
		p.queueLayer(e, l)
	}
	return PullReady, s.wake
}

// finishStreamed is Finished for an entry with a pull attached: the engine
// keeps the blocks whatever the outcome (the pusher may be reading them)
// until PushDone; a finished prompt's last blocks are queued.
func (p *ProducerCore) finishStreamed(e *prodEntry, blocks []int, numTokens int, ok bool, now time.Time) bool {
	e.blocks = slices.Clone(blocks)
	e.held = true
	if !ok {
		e.failed = true
	} else {
		e.ready, e.readyAt = true, now
		p.computedAll(e, blocks, numTokens)
	}
	close(e.readyCh)
	e.stream.poke()
	return true
}

// computedAll records that every layer of e's numTokens-token prompt is
// computed in blocks and queues what an attached pull still lacks.
func (p *ProducerCore) computedAll(e *prodEntry, blocks []int, numTokens int) {
	e.promptLen = numTokens
	if len(blocks) >= len(e.table) {
		e.table = slices.Clone(blocks)
	}
	if e.layerTokens == nil {
		e.layerTokens = make([]int, p.layers)
	}
	for l := range e.layerTokens {
		e.layerTokens[l] = numTokens
		p.queueLayer(e, l)
	}
}

// Next tells tid's pusher what to do: StreamWrite with the pieces queued
// since its last call (it writes them, then calls Next again), StreamIdle
// (wait for the channel Attach returned), or an end state; after an end
// state the pusher calls PushDone.
func (p *ProducerCore) Next(tid string) (StreamState, []LayerWrite) {
	e := p.entries[tid]
	if e == nil || e.stream == nil {
		return StreamReleased, nil
	}
	s := e.stream
	switch {
	case e.released:
		return StreamReleased, nil
	case s.broken:
		return StreamBroken, nil
	case e.failed:
		return StreamFailed, nil
	case len(s.queue) > 0:
		q := s.queue
		s.queue = nil
		return StreamWrite, q
	case !e.ready:
		return StreamIdle, nil
	}
	target := min((e.promptLen+p.blockSize-1)/p.blockSize, s.first+len(s.dst))
	for _, n := range s.sent {
		if n < target {
			return StreamIdle, nil // cannot happen: Finished queued every layer
		}
	}
	return StreamDone, nil
}

// StreamInfo is what the pusher of tid answers with: the prompt length
// prefill computed, decode's, and when the prefill finished (zero before).
func (p *ProducerCore) StreamInfo(tid string) (promptLen, decodeTokens int, readyAt time.Time) {
	e := p.entries[tid]
	if e == nil || e.stream == nil {
		return 0, 0, time.Time{}
	}
	return e.promptLen, e.stream.numTokens, e.readyAt
}

// Preempted records that the engine preempted request reqID (its blocks
// were freed and may be reused before it recomputes). A transfer streaming
// from it is broken (the pusher answers failed, decode recomputes); the
// transfer id is returned so that the caller cancels its writes. Without a
// pull attached, the progress is forgotten (the next steps recompute it).
func (p *ProducerCore) Preempted(reqID string) (tid string, broken bool) {
	for id, e := range p.entries {
		if e.reqID != reqID || e.ready || e.failed {
			continue
		}
		clear(e.layerTokens)
		if e.stream != nil {
			e.stream.broken = true
			e.stream.queue = nil
			e.stream.poke()
			return id, true
		}
		return id, false
	}
	return "", false
}

// StreamEnd is the end state tid's stream reached without its pusher
// (released, broken, failed), or StreamIdle when none.
func (p *ProducerCore) StreamEnd(tid string) StreamState {
	e := p.entries[tid]
	switch {
	case e == nil || e.stream == nil || e.released:
		return StreamReleased
	case e.stream.broken:
		return StreamBroken
	case e.failed:
		return StreamFailed
	}
	return StreamIdle
}
