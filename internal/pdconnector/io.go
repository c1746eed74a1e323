package pdconnector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/transfer"
)

// ---- decode side: pull ----

func (c *Connector) peer(ctx context.Context, addr string) (bootstrap.QueryResponse, error) {
	c.mu.Lock()
	q, ok := c.peers[addr]
	c.mu.Unlock()
	if ok {
		return q, nil
	}
	q, err := c.boot.Query(ctx, addr)
	if err != nil {
		return q, err
	}
	c.mu.Lock()
	c.peers[addr] = q
	c.mu.Unlock()
	return q, nil
}

// sglangRoute learns a prefill's pull address from its SGLang bootstrap
// server: GET /route with every rank -1 (page size and KV dtype must match
// ours), then the rank (dp 0, tp 0, pp 0): rank_ip:rank_port.
func (c *Connector) sglangRoute(ctx context.Context, addr string) (string, error) {
	var info bootstrap.ServerInfo
	if err := c.boot.Route(ctx, addr, -1, -1, -1, &info); err != nil {
		return "", fmt.Errorf("pdconnector: prefill bootstrap %s unreachable: %w", addr, err)
	}
	if info.PageSize != 0 && info.PageSize != c.layout.BlockSize {
		return "", fmt.Errorf("%w: prefill at %s has page size %d, this decode engine %d", ErrIncompatible, addr, info.PageSize, c.layout.BlockSize)
	}
	if info.KVCacheDType != "" && info.KVCacheDType != kvDType {
		return "", fmt.Errorf("%w: prefill at %s has KV dtype %s, this decode engine %s", ErrIncompatible, addr, info.KVCacheDType, kvDType)
	}
	var ri bootstrap.RouteInfo
	if err := c.boot.Route(ctx, addr, 0, 0, 0, &ri); err != nil {
		return "", fmt.Errorf("pdconnector: prefill bootstrap %s: %w", addr, err)
	}
	return net.JoinHostPort(ri.RankIP, strconv.Itoa(ri.RankPort)), nil
}

// kvDType is the engines' KV dtype, as SGLang's route reports it.
const kvDType = "float32"

func (c *Connector) forgetPeer(addr string) {
	c.mu.Lock()
	delete(c.peers, addr)
	c.mu.Unlock()
}

// runPull asks prefill to push p's blocks and records the outcome. It
// returns only when prefill answered (so it stopped writing) or PullTimeout
// passed (prefill stops writing before that).
func (c *Connector) runPull(ctx context.Context, p PullSpec) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PullTimeout)
	defer cancel()
	resp, err := c.pull(ctx, p)
	if err != nil {
		c.forgetPeer(p.Bootstrap)
	}
	c.pullDone(p, err, resp, time.Since(start).Nanoseconds())
}

// pullDone records a pull's outcome.
func (c *Connector) pullDone(p PullSpec, err error, resp bootstrap.PullResponse, nanos int64) {
	msg := ""
	if err != nil {
		msg = err.Error()
		c.log.Warn("kv pull failed", "transfer_id", p.TransferID, "request", p.ReqID, "err", err)
	}
	c.mu.Lock()
	c.cons.PullDone(p.ReqID, msg, resp.Bytes, nanos, resp.Nanos, resp.Requests)
	if resp.Aux != nil && err == nil {
		c.cons.SetAux(p.ReqID, *resp.Aux)
	}
	if resp.Layerwise && err == nil {
		c.cons.SetStream(p.ReqID, resp.TailNanos)
	}
	c.mu.Unlock()
	switch {
	case err == nil:
		c.m.pulls.WithLabelValues("ok").Inc()
		c.m.pullBytes.Add(float64(resp.Bytes))
		c.m.pullSecs.Observe(float64(nanos) / 1e9)
	default:
		c.m.pulls.WithLabelValues("failed").Inc()
	}
}

func (c *Connector) pull(ctx context.Context, p PullSpec) (bootstrap.PullResponse, error) {
	if p.Contract == ContractSGLang {
		addr, err := c.sglangRoute(ctx, p.Bootstrap)
		if err != nil {
			return bootstrap.PullResponse{}, err
		}
		p.Bootstrap = addr
	}
	q, err := c.peer(ctx, p.Bootstrap)
	if err == nil && p.EngineID != "" && q.EngineID != p.EngineID {
		// A restarted prefill on the same address has a new engine id: the
		// cached registry is stale, ask again once.
		c.forgetPeer(p.Bootstrap)
		q, err = c.peer(ctx, p.Bootstrap)
	}
	if err != nil {
		return bootstrap.PullResponse{}, fmt.Errorf("pdconnector: prefill bootstrap %s unreachable: %w", p.Bootstrap, err)
	}
	if q.CompatHash != c.compat || q.ProtocolVersion != bootstrap.ProtocolVersion {
		return bootstrap.PullResponse{}, fmt.Errorf("%w: prefill engine %s has compatibility %s (protocol %d), this decode engine %s (protocol %d): model, weights, dtype, layers, KV heads, head size or block size differ",
			ErrIncompatible, q.EngineID, q.CompatHash, q.ProtocolVersion, c.compat, bootstrap.ProtocolVersion)
	}
	if q.KVLayout != kvcache.BlockLayout || q.TPSize <= 0 || c.layout.NumKVHeads%q.TPSize != 0 {
		return bootstrap.PullResponse{}, fmt.Errorf("%w: prefill engine %s has KV layout %q across %d TP ranks, this decode engine %q across %d (%d KV heads)",
			ErrIncompatible, q.EngineID, q.KVLayout, q.TPSize, kvcache.BlockLayout, c.layout.TPSize(), c.layout.NumKVHeads)
	}
	if p.EngineID != "" && q.EngineID != p.EngineID {
		return bootstrap.PullResponse{}, fmt.Errorf("pdconnector: bootstrap %s serves engine %s, the request names %s", p.Bootstrap, q.EngineID, p.EngineID)
	}
	dl, _ := ctx.Deadline()
	req := bootstrap.PullRequest{TransferID: p.TransferID, ProtocolVersion: bootstrap.ProtocolVersion, CompatHash: c.compat,
		TPSize: c.layout.TPSize(), TPRank: 0, TPRanks: c.layout.TPSize(), KVLayout: kvcache.BlockLayout,
		Segment: c.te.Name(), LayerAddrs: c.bases, BlockBytes: c.layout.BlockBytes(),
		NumTokens: p.NumTokens, FirstBlock: p.FirstBlock, BlockIDs: p.BlockIDs,
		TimeoutMS: max(1, time.Until(dl).Milliseconds())}
	release, err := c.mintPullGrants(&req, dl)
	if err != nil {
		return bootstrap.PullResponse{}, fmt.Errorf("pdconnector: grant the blocks of %s: %w", p.TransferID, err)
	}
	// Returning means prefill answered (it stopped writing) or the
	// deadline passed: no write is due any more.
	defer release()
	resp, err := c.boot.Pull(ctx, p.Bootstrap, req)
	if err != nil {
		// No answer: prefill may still have writes on the way (in its
		// sockets, in a partitioned network, in ours). The blocks go back to
		// the pool after this returns, so nothing prefill sent may land
		// later: end its lanes first.
		c.fence(q, p.TransferID)
		if ctx.Err() != nil {
			return resp, fmt.Errorf("pdconnector: pull of %s from %s timed out after %v: %w", p.TransferID, p.Bootstrap, c.cfg.PullTimeout, ctx.Err())
		}
		return resp, fmt.Errorf("pdconnector: pull of %s from %s: %w", p.TransferID, p.Bootstrap, err)
	}
	if resp.Status != bootstrap.StatusDone {
		return resp, fmt.Errorf("pdconnector: prefill %s refused pull of %s: %s: %s", p.Bootstrap, p.TransferID, resp.Code, resp.Error)
	}
	return resp, nil
}

// fence ends the data lanes of prefill q's workers into this engine after
// a pull that got no answer, and waits until they stopped writing (bounded:
// a lane holds the engine's bulk token at most tcp.BulkStall).
func (c *Connector) fence(q bootstrap.QueryResponse, tid string) {
	peers := make([]string, 0, len(q.Workers))
	for _, w := range q.Workers {
		peers = append(peers, w.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fenceWait)
	defer cancel()
	n, err := c.te.FenceFrom(ctx, peers...)
	c.m.fences.Inc()
	if err != nil {
		c.log.Error("kv lanes of a silent prefill still writing after the fence wait", "transfer_id", tid, "prefill", peers, "err", err)
		return
	}
	c.log.Warn("pull got no answer: prefill's kv lanes ended", "transfer_id", tid, "prefill", peers, "lanes", n)
}

// fenceWait bounds a fence (a lane waits for a bulk token at most this).
const fenceWait = 15 * time.Second

func (c *Connector) sendRelease(r ReleaseSpec) {
	sent := c.goTracked(context.Background(), func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := c.boot.Release(ctx, r.Bootstrap, r.TransferID); err != nil {
			c.m.releases.WithLabelValues("error").Inc()
			c.log.Warn("release not delivered (prefill frees after its abort timeout)", "transfer_id", r.TransferID, "err", err)
			return
		}
		c.m.releases.WithLabelValues("ok").Inc()
	})
	if !sent {
		c.m.releases.WithLabelValues("error").Inc()
		c.log.Warn("release not sent, connector stopped (prefill frees after its abort timeout)", "transfer_id", r.TransferID)
	}
}

// ---- prefill side: bootstrap.Handler ----

func failed(code, format string, a ...any) bootstrap.PullResponse {
	return bootstrap.PullResponse{Status: bootstrap.StatusFailed, Code: code, Error: fmt.Sprintf(format, a...)}
}

// Pull implements bootstrap.Handler: wait (bounded) for the transfer's
// prefill, write the blocks decode lacks into decode's memory, free ours.
func (c *Connector) Pull(ctx context.Context, req bootstrap.PullRequest) bootstrap.PullResponse {
	resp := c.servePull(ctx, req)
	result := resp.Status
	if result != bootstrap.StatusDone {
		result = resp.Code
		c.pushFailed.Add(1)
	}
	c.m.pushes.WithLabelValues(result).Inc()
	return resp
}

// waitPrefill waits for the prefill of transfer tid to finish and returns
// its blocks and prompt length; ok false carries the failed answer
// (prefill failed, already pulled, gone, or not in time).
func (c *Connector) waitPrefill(ctx context.Context, tid string) (blocks []int, numTokens int, _ bootstrap.PullResponse, ok bool) {
	for {
		c.mu.Lock()
		st, b, n, ch := c.prod.StartPull(tid, c.clock.Now())
		c.mu.Unlock()
		switch st {
		case PullFailed:
			return nil, 0, failed(bootstrap.CodePrefillError, "prefill of %s failed or was aborted", tid), false
		case PullBusy:
			return nil, 0, failed(bootstrap.CodeBadRequest, "transfer %s is already being pulled", tid), false
		case PullGone:
			return nil, 0, failed(bootstrap.CodeUnknown, "transfer %s was released or timed out", tid), false
		case PullWait:
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				if c.isStopped() {
					return nil, 0, failed(bootstrap.CodeAborted, "prefill engine %s is shutting down", c.cfg.EngineID), false
				}
				return nil, 0, failed(bootstrap.CodeTimeout, "prefill of %s did not finish in time", tid), false
			}
		}
		return b, n, bootstrap.PullResponse{}, true
	}
}

// incompatible answers a pull whose decode engine cannot take this
// engine's KV: another protocol, model or layout, a TP size that does not
// divide the KV heads, or blocks of the wrong size.
func (c *Connector) incompatible(req bootstrap.PullRequest) (bootstrap.PullResponse, bool) {
	if req.ProtocolVersion != bootstrap.ProtocolVersion || req.CompatHash != c.compat {
		return failed(bootstrap.CodeIncompatible, "incompatible peer: decode has compatibility %s (protocol %d), prefill engine %s has %s (protocol %d)",
			req.CompatHash, req.ProtocolVersion, c.cfg.EngineID, c.compat, bootstrap.ProtocolVersion), true
	}
	if req.KVLayout != kvcache.BlockLayout {
		return failed(bootstrap.CodeIncompatible, "decode KV layout %q, prefill engine %s has %q", req.KVLayout, c.cfg.EngineID, kvcache.BlockLayout), true
	}
	if c.layout.NumKVHeads%req.TPSize != 0 {
		return failed(bootstrap.CodeIncompatible, "decode tp_size %d does not divide the %d KV heads", req.TPSize, c.layout.NumKVHeads), true
	}
	if want := c.layout.NumKVHeads / req.TPSize * c.layout.HeadBytes(); len(req.BlockIDs) > 0 &&
		(req.BlockBytes != want || len(req.LayerAddrs) != max(1, req.TPRanks)*c.layout.NumLayers) {
		return failed(bootstrap.CodeIncompatible, "decode block %d bytes x %d layer regions for %d of %d TP ranks, prefill expects %d bytes x %d layers per rank",
			req.BlockBytes, len(req.LayerAddrs), max(1, req.TPRanks), req.TPSize, want, c.layout.NumLayers), true
	}
	return bootstrap.PullResponse{}, false
}

func (c *Connector) servePull(ctx context.Context, req bootstrap.PullRequest) bootstrap.PullResponse {
	c.mu.Lock()
	registered := c.compat != ""
	streaming := c.prod.Streaming()
	c.mu.Unlock()
	if !registered {
		return failed(bootstrap.CodeUnknown, "prefill engine not started yet")
	}
	if resp, bad := c.incompatible(req); bad {
		return resp
	}
	// A stopping connector answers its pulls at once.
	ctx, done, running := c.track(ctx)
	defer done()
	if !running {
		return failed(bootstrap.CodeAborted, "prefill engine %s is shutting down", c.cfg.EngineID)
	}
	// Answer (and stop writing) before decode gives up.
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(c.cfg.PullTimeout)
	}
	margin := min(time.Until(dl)/10, time.Second)
	ctx, cancel := context.WithDeadline(ctx, dl.Add(-margin))
	defer cancel()
	c.preparePeer(ctx, req)
	if streaming && len(req.BlockIDs) > 0 {
		return c.serveStream(ctx, req)
	}
	blocks, numTokens, resp, ok := c.waitPrefill(ctx, req.TransferID)
	if !ok {
		return resp
	}
	if ctx.Err() != nil {
		// Decode left (its side channel was reset) or the deadline came:
		// it may already have reused the blocks, write nothing.
		return failed(bootstrap.CodeTimeout, "decode gave up on the pull of %s before the push", req.TransferID)
	}
	pushCtx, pushCancel := context.WithCancel(ctx)
	defer pushCancel()
	c.mu.Lock()
	c.pushCancel[req.TransferID] = pushCancel
	aux, hasAux := c.prod.Aux(req.TransferID)
	c.mu.Unlock()
	resp = c.push(pushCtx, req, blocks, numTokens)
	if hasAux && resp.Status == bootstrap.StatusDone {
		resp.Aux = &aux
	}
	c.mu.Lock()
	delete(c.pushCancel, req.TransferID)
	c.prod.PushDone(req.TransferID, c.clock.Now())
	c.mu.Unlock()
	return resp
}

func (c *Connector) push(ctx context.Context, req bootstrap.PullRequest, blocks []int, numTokens int) bootstrap.PullResponse {
	if numTokens != req.NumTokens {
		return failed(bootstrap.CodeBadRequest, "decode expects %d prompt tokens, prefill computed %d", req.NumTokens, numTokens)
	}
	bs := c.layout.BlockSize
	need := (numTokens + bs - 1) / bs
	if len(req.BlockIDs) == 0 {
		return bootstrap.PullResponse{Status: bootstrap.StatusDone} // full hit: nothing to send
	}
	if req.FirstBlock+len(req.BlockIDs) != need || need > len(blocks) {
		return failed(bootstrap.CodeBadRequest, "decode asks blocks [%d,%d), the prompt has %d blocks", req.FirstBlock, req.FirstBlock+len(req.BlockIDs), need)
	}
	start := time.Now()
	seg, err := c.te.OpenSegment(ctx, req.Segment)
	if err != nil {
		return failed(bootstrap.CodeTransfer, "open decode segment %s: %v", req.Segment, err)
	}
	src, dst := c.sides(req)
	byLayer, err := PlanWrites(seg, src, dst, c.layout.HeadBytes(), blocks[req.FirstBlock:need], req.BlockIDs)
	if err != nil {
		return failed(bootstrap.CodeBadRequest, "%v", err)
	}
	var reqs []transfer.Request
	for _, l := range byLayer {
		reqs = append(reqs, l...)
	}
	reqs = decodePullGrants(req.Grants).attach(reqs)
	// A decode restarted under the same segment name, or one that
	// registered memory since the engine looked, is the transfer engine's
	// business: it refetches the peer's descriptor itself.
	if err := c.te.Transfer(ctx, reqs); err != nil {
		code := bootstrap.CodeTransfer
		if errors.Is(ctx.Err(), context.Canceled) {
			code = bootstrap.CodeAborted
		} else if ctx.Err() != nil {
			code = bootstrap.CodeTimeout
		}
		return failed(code, "write %d blocks to %s: %v", len(req.BlockIDs), req.Segment, err)
	}
	n := int64(len(req.BlockIDs) * dst.RankHeads * len(dst.Bases) * c.layout.HeadBytes() * c.layout.NumLayers)
	el := time.Since(start)
	c.m.pushBytes.Add(float64(n))
	c.m.pushSecs.Observe(el.Seconds())
	return bootstrap.PullResponse{Status: bootstrap.StatusDone, Blocks: len(req.BlockIDs), Bytes: n, Nanos: el.Nanoseconds(), Requests: len(reqs)}
}

// Release implements bootstrap.Handler.
func (c *Connector) Release(transferID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	known, pushing := c.prod.Release(transferID, c.clock.Now())
	if pushing {
		if cancel := c.pushCancel[transferID]; cancel != nil {
			cancel()
		}
	}
	return known
}

// preparePeer has the transfer engine get ready for a decode peer (open
// its segment, map its shared KV regions, dial lanes) when its first pull
// arrives, while the prefill still computes, so the push does not pay for
// it. Peers already seen are skipped; a failure only means the first push
// does that work instead.
func (c *Connector) preparePeer(ctx context.Context, req bootstrap.PullRequest) {
	if len(req.LayerAddrs) == 0 {
		return
	}
	c.mu.Lock()
	seen := c.prepared[req.Segment]
	c.prepared[req.Segment] = true
	c.mu.Unlock()
	if seen {
		return
	}
	if err := c.te.PreparePeer(ctx, req.Segment); err != nil {
		c.log.Debug("preparing the transfer engine for a decode peer failed", "segment", req.Segment, "err", err)
	}
}

// sides is the write planner's view of a pull: the local (prefill) ranks'
// layer regions and the ranks of decode the pull covers.
func (c *Connector) sides(req bootstrap.PullRequest) (src, dst Side) {
	dst = Side{FirstRank: req.TPRank, RankHeads: c.layout.NumKVHeads / max(1, req.TPSize)}
	for r := range max(1, req.TPRanks) {
		dst.Bases = append(dst.Bases, req.LayerAddrs[r*c.layout.NumLayers:(r+1)*c.layout.NumLayers])
	}
	return Side{Bases: c.localBases, RankHeads: c.layout.RankHeads()}, dst
}
