package pdconnector

import (
	"context"
	"errors"
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/transfer"
)

// Layer-wise streaming, the shell's share: the engine's hooks feed the
// ProducerCore (BuildConnectorMeta: which prompt tokens each step computes;
// SaveKVLayer: a layer is done), and the goroutine serving decode's pull is
// the stream's pusher: it writes each layer's blocks as the core queues
// them, while the next layers compute, and answers once the prefill ended
// and everything was written.

// stepMeta is what BuildConnectorMeta hands the worker half for one step.
type stepMeta struct {
	pulls []PullSpec // decode: pulls to start
	saves []string   // prefill: transfers whose layers this step computes
}

// scheduleStreams tells the core what this step computes of every prefill
// that decode will pull, and breaks the streams of preempted requests. It
// returns the transfer ids whose layers SaveKVLayer reports.
func (c *Connector) scheduleStreams(out *engine.SchedulerOutput) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.prod.Streaming() || out == nil {
		return nil
	}
	for _, id := range out.PreemptedReqIDs {
		if tid, broken := c.prod.Preempted(id); broken {
			// Its blocks were freed: stop reading them (the answer is failed).
			if cancel := c.pushCancel[tid]; cancel != nil {
				cancel()
			}
		}
	}
	now := c.clock.Now()
	var saves []string
	for _, s := range out.Scheduled {
		r := s.Req
		n := len(r.PromptTokens())
		if s.NumComputedTokens >= n {
			continue // decoding: nothing of the prompt
		}
		tid, _, ok, err := prefillKey(r.ID(), r.KVTransferParams())
		if !ok || err != nil || tid == "" {
			continue
		}
		c.prod.Scheduled(tid, r.ID(), s.BlockIDs, s.NumComputedTokens, s.NumComputedTokens+s.NumScheduledTokens, n, now)
		saves = append(saves, tid)
	}
	return saves
}

// planLayer is the transfer requests of one stream piece: layer w.Layer of
// prefill's blocks w.Src into decode's blocks w.Dst, the pull's sides
// (sides, made once per stream). Every streamed byte is planned here, each
// decode rank getting its heads (PlanLayerWrites).
func (c *Connector) planLayer(seg transfer.SegmentID, src, dst Side, w LayerWrite) ([]transfer.Request, error) {
	return PlanLayerWrites(seg, src, dst, c.layout.HeadBytes(), w.Src, w.Dst, w.Layer)
}

// serveStream serves a pull by streaming: attach to the transfer's
// prefill (running or finished), write its layers as they are computed,
// answer when all are written or the stream ended otherwise; then free.
func (c *Connector) serveStream(ctx context.Context, req bootstrap.PullRequest) bootstrap.PullResponse {
	tid := req.TransferID
	pushCtx, pushCancel := context.WithCancel(ctx)
	defer pushCancel()
	c.mu.Lock()
	st, wake := c.prod.Attach(tid, req.FirstBlock, req.BlockIDs, req.NumTokens, c.clock.Now())
	if st == PullReady {
		c.pushCancel[tid] = pushCancel
	}
	c.mu.Unlock()
	switch st {
	case PullFailed:
		return failed(bootstrap.CodePrefillError, "prefill of %s failed or was aborted", tid)
	case PullBusy:
		return failed(bootstrap.CodeBadRequest, "transfer %s is already being pulled", tid)
	case PullGone:
		return failed(bootstrap.CodeUnknown, "transfer %s was released or timed out", tid)
	}
	resp := c.stream(pushCtx, req, wake)
	c.mu.Lock()
	if aux, ok := c.prod.Aux(tid); ok && resp.Status == bootstrap.StatusDone {
		resp.Aux = &aux
	}
	delete(c.pushCancel, tid)
	c.prod.PushDone(tid, c.clock.Now())
	c.mu.Unlock()
	return resp
}

// stream is the pusher's loop. It returns only when no write of the
// stream runs any more (the transfer engine's Transfer returns once its
// writes stopped, even on cancel or timeout).
func (c *Connector) stream(ctx context.Context, req bootstrap.PullRequest, wake <-chan struct{}) bootstrap.PullResponse {
	tid := req.TransferID
	start := time.Now()
	seg, err := c.te.OpenSegment(ctx, req.Segment)
	if err != nil {
		return c.streamFailed(ctx, tid, "open decode segment %s: %v", req.Segment, err)
	}
	src, dst := c.sides(req)
	grants := decodePullGrants(req.Grants)
	bb := dst.RankHeads * len(dst.Bases) * c.layout.HeadBytes() // one block of one layer, every rank the pull covers
	var busy time.Duration
	var bytes int64
	var nreq int
	for {
		c.mu.Lock()
		st, writes := c.prod.Next(tid)
		c.mu.Unlock()
		switch st {
		case StreamWrite:
			// The write's time counts its planning, as a whole-request
			// push's does.
			t := time.Now()
			var reqs []transfer.Request
			for _, w := range writes {
				r, err := c.planLayer(seg, src, dst, w)
				if err != nil {
					return failed(bootstrap.CodeBadRequest, "%v", err)
				}
				reqs = append(reqs, r...)
				bytes += int64(len(w.Src) * bb)
			}
			reqs = grants.attach(reqs)
			if err := c.te.Transfer(ctx, reqs); err != nil {
				return c.streamFailed(ctx, tid, "write %d requests to %s: %v", len(reqs), req.Segment, err)
			}
			busy += time.Since(t)
			nreq += len(reqs)
			c.streamWrites.Add(1)
		case StreamIdle:
			select {
			case <-wake:
			case <-ctx.Done():
				return c.streamFailed(ctx, tid, "prefill of %s did not finish in time", tid)
			}
		case StreamDone:
			c.mu.Lock()
			promptLen, decodeTokens, readyAt := c.prod.StreamInfo(tid)
			now := c.clock.Now()
			c.mu.Unlock()
			if promptLen != decodeTokens {
				return failed(bootstrap.CodeBadRequest, "decode expects %d prompt tokens, prefill computed %d", decodeTokens, promptLen)
			}
			bs := c.layout.BlockSize
			if need := (promptLen + bs - 1) / bs; req.FirstBlock+len(req.BlockIDs) != need {
				return failed(bootstrap.CodeBadRequest, "decode asks blocks [%d,%d), the prompt has %d blocks", req.FirstBlock, req.FirstBlock+len(req.BlockIDs), need)
			}
			tail := min(max(now.Sub(readyAt), 0), time.Since(start))
			c.m.pushBytes.Add(float64(bytes))
			c.m.pushSecs.Observe(busy.Seconds())
			return bootstrap.PullResponse{Status: bootstrap.StatusDone, Blocks: len(req.BlockIDs), Bytes: bytes,
				Nanos: busy.Nanoseconds(), Requests: nreq, Layerwise: true, TailNanos: tail.Nanoseconds()}
		case StreamFailed:
			return failed(bootstrap.CodePrefillError, "prefill of %s failed or was aborted", tid)
		case StreamBroken:
			return failed(bootstrap.CodePrefillError, "prefill of %s was preempted while its KV was streamed", tid)
		default: // StreamReleased
			return failed(bootstrap.CodeAborted, "transfer %s was released by decode", tid)
		}
	}
}

// streamFailed answers a stream that stopped on an error: the core's
// reason when it has one (released, aborted, preempted: those cancel ctx),
// else the error itself, coded by ctx.
func (c *Connector) streamFailed(ctx context.Context, tid, format string, a ...any) bootstrap.PullResponse {
	c.mu.Lock()
	st := c.prod.StreamEnd(tid)
	c.mu.Unlock()
	switch {
	case st == StreamReleased:
		return failed(bootstrap.CodeAborted, "transfer %s was released by decode", tid)
	case st == StreamBroken:
		return failed(bootstrap.CodePrefillError, "prefill of %s was preempted while its KV was streamed", tid)
	case st == StreamFailed:
		return failed(bootstrap.CodePrefillError, "prefill of %s failed or was aborted", tid)
	case c.isStopped():
		return failed(bootstrap.CodeAborted, "prefill engine %s is shutting down", c.cfg.EngineID)
	case errors.Is(ctx.Err(), context.Canceled):
		return failed(bootstrap.CodeAborted, format, a...)
	case ctx.Err() != nil:
		return failed(bootstrap.CodeTimeout, format, a...)
	}
	return failed(bootstrap.CodeTransfer, format, a...)
}
