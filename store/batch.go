package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/hotcache"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/transfer"
)

// batchParallel bounds the goroutines a batch call uses.
const batchParallel = 8

func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, batchParallel)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// BatchPut stores values[i] under keys[i] and returns one error per key
// (nil on success). The values are copied into one registered slab, space
// is allocated with one BatchPutStart, every replica is written in one
// transfer batch and the puts are committed with one BatchPutCommit. If the
// batched write fails, the puts are revoked and retried one by one.
//
// A batch of more keys than one master call carries (see batchSpans) runs
// span by span.
func (c *Client) BatchPut(ctx context.Context, keys []string, values [][]byte, o PutOptions) []error {
	c.hotForget(keys...)
	if len(values) == len(keys) {
		if spans := batchSpans(keys); len(spans) > 1 {
			errs := make([]error, 0, len(keys))
			for _, sp := range spans {
				errs = append(errs, c.BatchPut(ctx, keys[sp[0]:sp[1]], values[sp[0]:sp[1]], o)...)
			}
			return errs
		}
	}
	errs := make([]error, len(keys))
	if err := c.checkBatch(len(keys), len(values)); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	srcs, release := c.stageBatch(keys, values, errs)
	defer release()
	idx, results := c.batchPutStart(ctx, keys, values, o, errs)
	if len(idx) == 0 {
		return errs
	}
	started, failed := c.batchWrite(ctx, keys, srcs, idx, results, o, errs)
	if failed {
		c.revokeAndRetry(ctx, keys, srcs, started, o, errs)
		return errs
	}
	c.batchPutCommit(ctx, keys, values, started, errs)
	return errs
}

// checkBatch refuses a batch whose keys and values do not pair up, or on a
// closed client.
func (c *Client) checkBatch(nkeys, nvalues int) error {
	if nkeys != nvalues {
		return fmt.Errorf("store: %w: %d keys, %d values", ErrInvalid, nkeys, nvalues)
	}
	if c.isClosed() {
		return ErrClosed
	}
	return nil
}

// stageBatch makes every value transferable and returns where to write
// each from, and a release that undoes the registrations. Values from
// directMin up are registered in place (no copy); the rest, and any value
// whose registration fails (e.g. the same slice twice), are copied into one
// registered slab. Empty values and a failed slab registration are recorded
// in errs.
func (c *Client) stageBatch(keys []string, values [][]byte, errs []error) ([][]byte, func()) {
	srcs := make([][]byte, len(keys))
	var registered [][]byte
	release := func() {
		for _, b := range registered {
			_ = c.mover.Unregister(transfer.AddrOf(b))
		}
	}
	total := 0
	for i, v := range values {
		switch {
		case len(v) == 0:
			errs[i] = fmt.Errorf("store: put %q: %w: empty value", keys[i], ErrInvalid)
		case len(v) >= directMin && c.mover.RegisterBytes(v, "cpu:0") == nil:
			srcs[i] = v
			registered = append(registered, v)
		default:
			total += len(v)
		}
	}
	if total == 0 {
		return srcs, release
	}
	slab := make([]byte, total)
	if err := c.mover.RegisterBytes(slab, "cpu:0"); err != nil {
		for i := range errs {
			if errs[i] == nil && srcs[i] == nil {
				errs[i] = fmt.Errorf("store: put %q: register staging slab: %w", keys[i], err)
			}
		}
		return srcs, release
	}
	registered = append(registered, slab)
	off := 0
	for i, v := range values {
		if errs[i] == nil && srcs[i] == nil {
			srcs[i] = slab[off : off+len(v) : off+len(v)]
			off += copy(srcs[i], v)
		}
	}
	return srcs, release
}

// batchPutStart allocates space for every key not failed yet with one
// BatchPutStart. It returns the indexes of the keys asked for and the
// master's answer for each, in the same order; a failed call is recorded
// in errs of every key asked for (and no index is returned).
func (c *Client) batchPutStart(ctx context.Context, keys []string, values [][]byte, o PutOptions, errs []error) ([]int, []*pb.PutStartResponse) {
	req := &pb.BatchPutStartRequest{}
	var idx []int
	for i, v := range values {
		if errs[i] != nil {
			continue
		}
		req.Puts = append(req.Puts, &pb.PutStartRequest{ClientId: c.cfg.ClientID, Key: keys[i], Size: uint64(len(v)),
			Config: c.rcToPB(o), Upsert: o.Upsert})
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return nil, nil
	}
	// A hot call: fastMaster bounds it by RPCTimeout itself.
	resp, err := c.rpc.BatchPutStart(ctx, req)
	if err == nil && len(resp.Results) != len(idx) {
		err = fmt.Errorf("master answered %d of %d puts", len(resp.Results), len(idx))
	}
	if err != nil {
		for _, i := range idx {
			errs[i] = fmt.Errorf("store: put %q: master rpc: %w", keys[i], err)
		}
		return nil, nil
	}
	return idx, resp.Results
}

// batchWrite writes every replica of the started puts in one transfer
// batch. It returns the keys whose put started (refusals are recorded in
// errs) and whether the batch failed: a segment could not be opened or the
// transfer failed.
func (c *Client) batchWrite(ctx context.Context, keys []string, srcs [][]byte, idx []int, results []*pb.PutStartResponse, o PutOptions, errs []error) (started []int, failed bool) {
	var reqs []transfer.Request
	for j, r := range results {
		i := idx[j]
		if err := statusErr(r.Status); err != nil {
			errs[i] = fmt.Errorf("store: put %q: %w", keys[i], err)
			continue
		}
		started = append(started, i)
		hdr, release, err := c.stageHeader(ctx, keys[i], r, len(srcs[i]), Checksum(srcs[i]), o, nil)
		if err != nil {
			errs[i] = err
			continue
		}
		defer release()
		segs := make([]transfer.SegmentID, 0, len(r.Replicas))
		for _, rep := range r.Replicas {
			seg, err := c.mover.OpenSegment(ctx, rep.Endpoint)
			if err != nil {
				errs[i] = fmt.Errorf("store: put %q: %w: open segment %s: %w", keys[i], ErrTransfer, rep.Endpoint, err)
				break
			}
			segs = append(segs, seg)
			reqs = append(reqs, transfer.Request{Op: transfer.OpWrite, Local: transfer.AddrOf(srcs[i]), Segment: seg, Remote: rep.Addr, Length: len(srcs[i]), Grant: grantString(rep.Grant)})
		}
		if len(segs) == len(r.Replicas) {
			reqs = append(reqs, headerWrites(hdr, r.Replicas, segs)...)
		}
	}
	for _, i := range started {
		failed = failed || errs[i] != nil
	}
	if !failed && len(reqs) > 0 {
		// All or nothing: one scatter-gather request per run of writes
		// to one segment.
		failed = c.mover.Transfer(ctx, transfer.Coalesce(reqs, 0)) != nil
	}
	return started, failed
}

// revokeAndRetry revokes every started put and retries them one by one, so
// each key gets its own outcome.
func (c *Client) revokeAndRetry(ctx context.Context, keys []string, srcs [][]byte, started []int, o PutOptions, errs []error) {
	rctx, cancel := c.rpcCtx(context.WithoutCancel(ctx))
	for _, i := range started {
		_ = c.puts.revoke(rctx, &pb.PutRevokeRequest{ClientId: c.cfg.ClientID, Key: keys[i]})
	}
	cancel()
	parallel(len(started), func(j int) {
		i := started[j]
		errs[i] = c.putRegistered(ctx, keys[i], srcs[i], o)
	})
}

// batchPutCommit commits the written puts with their CRC32C in one
// BatchPutCommit and records each outcome in errs.
func (c *Client) batchPutCommit(ctx context.Context, keys []string, values [][]byte, started []int, errs []error) {
	req := &pb.BatchPutCommitRequest{}
	for _, i := range started {
		req.Commits = append(req.Commits, &pb.PutCommitRequest{ClientId: c.cfg.ClientID, Key: keys[i], Crc32C: Checksum(values[i])})
	}
	// A hot call: fastMaster bounds it by RPCTimeout itself.
	resp, err := c.rpc.BatchPutCommit(ctx, req)
	for j, i := range started {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("store: put %q: master rpc: %w", keys[i], err)
		case j < len(resp.Results):
			if e := statusErr(resp.Results[j].GetStatus()); e != nil {
				errs[i] = fmt.Errorf("store: put %q: %w", keys[i], e)
			}
		}
	}
}

// putRegistered is PutFrom without the isClosed check, for batch fallbacks.
func (c *Client) putRegistered(ctx context.Context, key string, src []byte, o PutOptions) error {
	_, err := c.put(ctx, key, src, o, true)
	return err
}

// BatchGet returns the value and error of each key. The values are read
// into one registered slab (one master call for all replica lists, one
// transfer batch); keys whose first replica fails are retried one by one
// through every replica.
func (c *Client) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	if spans := batchSpans(keys); len(spans) > 1 {
		vals, errs := make([][]byte, 0, len(keys)), make([]error, 0, len(keys))
		for _, sp := range spans {
			v, e := c.BatchGet(ctx, keys[sp[0]:sp[1]])
			vals, errs = append(vals, v...), append(errs, e...)
		}
		return vals, errs
	}
	vals := make([][]byte, len(keys))
	var slab []byte
	ns, errs := c.batchRead(ctx, keys, func(infos []*pb.ObjectInfo) ([][]byte, func(), error) {
		total := 0
		for _, in := range infos {
			if in != nil {
				total += int(in.Size)
			}
		}
		slab = make([]byte, total)
		if total > 0 {
			if err := c.mover.RegisterBytes(slab, "cpu:0"); err != nil {
				return nil, nil, err
			}
		}
		bufs := make([][]byte, len(infos))
		off := 0
		for i, in := range infos {
			if in != nil {
				bufs[i] = slab[off : off+int(in.Size) : off+int(in.Size)]
				off += int(in.Size)
			}
		}
		return bufs, func() {
			if total > 0 {
				_ = c.mover.Unregister(transfer.AddrOf(slab))
			}
		}, nil
	}, func(i int, b []byte) { vals[i] = b })
	for i := range vals {
		if errs[i] != nil || ns[i] == 0 {
			vals[i] = nil
		}
	}
	return vals, errs
}

// BatchGetInto reads each key into the matching registered buffer and
// returns the lengths and errors (batched as BatchGet).
func (c *Client) BatchGetInto(ctx context.Context, keys []string, dsts [][]byte) ([]int, []error) {
	if len(dsts) != len(keys) {
		errs := make([]error, len(keys))
		for i := range errs {
			errs[i] = fmt.Errorf("store: %w: %d keys, %d buffers", ErrInvalid, len(keys), len(dsts))
		}
		return make([]int, len(keys)), errs
	}
	if spans := batchSpans(keys); len(spans) > 1 {
		ns, errs := make([]int, 0, len(keys)), make([]error, 0, len(keys))
		for _, sp := range spans {
			n, e := c.BatchGetInto(ctx, keys[sp[0]:sp[1]], dsts[sp[0]:sp[1]])
			ns, errs = append(ns, n...), append(errs, e...)
		}
		return ns, errs
	}
	return c.batchRead(ctx, keys, func(infos []*pb.ObjectInfo) ([][]byte, func(), error) {
		bufs := make([][]byte, len(infos))
		for i, in := range infos {
			if in != nil {
				bufs[i] = dsts[i]
			}
		}
		return bufs, func() {}, nil
	}, nil)
}

// batchRead fetches every replica list in one call, reads the first-choice
// replica of every found key in one transfer batch within the shortest
// lease, verifies each CRC32C, and falls back to a full single-key read
// (every replica in turn) for the keys that failed. bufs returns, per key,
// a registered buffer for the found ones (nil info = not found).
func (c *Client) batchRead(ctx context.Context, keys []string, bufs func([]*pb.ObjectInfo) ([][]byte, func(), error), done func(int, []byte)) ([]int, []error) {
	ns := make([]int, len(keys))
	errs := make([]error, len(keys))
	if c.isClosed() {
		for i := range errs {
			errs[i] = ErrClosed
		}
		return ns, errs
	}
	held := c.hotBatchLookup(keys) // nil with the hot cache off
	infos, deadline, ok := c.batchReplicaLists(ctx, keys, held, errs)
	if !ok {
		return ns, errs
	}
	bs, release, err := bufs(infos)
	if err != nil {
		for i := range infos {
			if infos[i] != nil {
				errs[i] = fmt.Errorf("store: get %q: %w", keys[i], err)
			}
		}
		return ns, errs
	}
	defer release()
	if held != nil {
		c.hotBatchServe(ctx, keys, infos, held, bs, ns, errs, done)
	}
	retry := c.batchFirstReads(ctx, keys, infos, bs, deadline, errs)
	var again []int
	for i, in := range infos {
		switch {
		case in == nil:
		case retry[i]:
			again = append(again, i)
		default:
			ns[i] = int(in.Size)
			if held != nil {
				c.hotFill(keys[i], in, bs[i][:in.Size])
			}
			if done != nil {
				done(i, bs[i][:in.Size])
			}
		}
	}
	parallel(len(again), func(j int) {
		i := again[j]
		ns[i], errs[i] = c.GetInto(ctx, keys[i], bs[i])
		if errs[i] == nil && done != nil {
			done(i, bs[i][:ns[i]])
		}
	})
	return ns, errs
}

// batchReplicaLists fetches every key's replica list (taking leases) in
// one call. infos[i] is nil for a key that failed (its error is in errs);
// deadline, half the shortest lease, bounds the batched read (the rest of
// the lease is left for the fallbacks); ok is false when no key can be read.
func (c *Client) batchReplicaLists(ctx context.Context, keys []string, held []hotcache.Entry, errs []error) (infos []*pb.ObjectInfo, deadline time.Time, ok bool) {
	// A hot call: fastMaster bounds it by RPCTimeout itself.
	start := c.clock.Now() // the leases start no earlier than this on the master's side
	resp, err := c.rpc.BatchGetReplicaList(ctx, hotBatchRequest(keys, held))
	if err == nil && len(resp.Results) != len(keys) {
		err = fmt.Errorf("master answered %d of %d keys", len(resp.Results), len(keys))
	}
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("store: get %q: master rpc: %w", keys[i], err)
		}
		return nil, time.Time{}, false
	}
	infos = make([]*pb.ObjectInfo, len(keys))
	var lease time.Duration = -1
	for i, r := range resp.Results {
		if e := statusErr(r.Status); e != nil {
			errs[i] = fmt.Errorf("store: get %q: %w", keys[i], e)
			continue
		}
		infos[i] = r
		if r.Unchanged { // served from the hot cache: no lease, no read
			ok = true
			continue
		}
		if l := time.Duration(r.LeaseTtlMs) * time.Millisecond; lease < 0 || l < lease {
			lease = l
		}
	}
	if lease < 0 {
		if ok {
			return infos, start, true
		}
		return nil, time.Time{}, false
	}
	return infos, start.Add(lease / 2), true
}

// batchFirstReads reads every key's first-choice replica into bs[i] in one
// transfer batch before deadline and checks the CRC32Cs. It returns which keys need a retry
// through every replica; a buffer too small fails its key (infos[i] is set
// to nil and the error recorded in errs).
func (c *Client) batchFirstReads(ctx context.Context, keys []string, infos []*pb.ObjectInfo, bs [][]byte, deadline time.Time, errs []error) []bool {
	var reqs []transfer.Request
	var reqKey []int
	retry := make([]bool, len(keys))
	for i, in := range infos {
		if in == nil {
			continue
		}
		if uint64(len(bs[i])) < in.Size {
			errs[i] = fmt.Errorf("store: get %q: value of %d bytes, buffer of %d: %w", keys[i], in.Size, len(bs[i]), ErrBufferTooSmall)
			infos[i] = nil
			continue
		}
		reps := c.order(in.Replicas)
		if len(reps) == 0 {
			// Only on disk: read through the node's engine in the same
			// batch (diskbatch.go), or one by one.
			if r, ok := c.diskRequest(ctx, in, bs[i]); ok {
				reqs = append(reqs, r)
				reqKey = append(reqKey, i)
			} else {
				retry[i] = true
			}
			continue
		}
		seg, err := c.mover.OpenSegment(ctx, reps[0].Endpoint)
		if err != nil {
			retry[i] = true
			continue
		}
		reqs = append(reqs, transfer.Request{Op: transfer.OpRead, Local: transfer.AddrOf(bs[i]), Segment: seg, Remote: reps[0].Addr, Length: int(in.Size), Grant: grantString(reps[0].Grant)})
		reqKey = append(reqKey, i)
	}
	if len(reqs) == 0 {
		return retry
	}
	lctx, lcancel := context.WithDeadline(ctx, deadline)
	// One scatter-gather request per run of reads from one segment; large
	// batches in groups whose CRC32Cs are checked while the next arrive
	// (batchpipe.go).
	c.transferChecked(lctx, reqs, func(k int, err error) {
		i := reqKey[k]
		if err != nil || Checksum(bs[i][:infos[i].Size]) != infos[i].Crc32C {
			retry[i] = true
		} else if len(infos[i].Replicas) == 0 {
			c.readFromDisk(keys[i], infos[i], bs[i][:infos[i].Size])
		}
	})
	lcancel()
	return retry
}

// BatchExist reports, in order, whether each key exists (one master call
// per span of keys, see batchSpans).
func (c *Client) BatchExist(ctx context.Context, keys []string) ([]bool, error) {
	if spans := batchSpans(keys); len(spans) > 1 {
		out := make([]bool, 0, len(keys))
		for _, sp := range spans {
			e, err := c.BatchExist(ctx, keys[sp[0]:sp[1]])
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		return out, nil
	}
	// A hot call: fastMaster bounds it by RPCTimeout itself.
	if out, ok, err := c.fast.batchExist(ctx, keys); ok {
		return out, err
	}
	r, err := c.rpc.BatchExist(ctx, &pb.BatchKeysRequest{Keys: keys})
	if err != nil {
		return nil, fmt.Errorf("store: batch exist: master rpc: %w", err)
	}
	out := make([]bool, len(keys))
	for i, e := range r.Results {
		if i < len(out) {
			out[i] = e.Exists
		}
	}
	return out, nil
}

// BatchRemove removes each key (one master call per span of keys, see
// batchSpans) and returns one error per key.
func (c *Client) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	c.hotForget(keys...)
	if spans := batchSpans(keys); len(spans) > 1 {
		errs := make([]error, 0, len(keys))
		for _, sp := range spans {
			errs = append(errs, c.BatchRemove(ctx, keys[sp[0]:sp[1]], force)...)
		}
		return errs
	}
	errs := make([]error, len(keys))
	req := &pb.BatchRemoveRequest{}
	for _, k := range keys {
		req.Removes = append(req.Removes, &pb.RemoveRequest{Key: k, Force: force})
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	sent := time.Now()
	r, err := c.rpc.BatchRemove(rctx, req)
	for i := range errs {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("store: batch remove: master rpc: %w", err)
		case i < len(r.Results):
			errs[i] = statusErr(r.Results[i])
		}
	}
	if err == nil {
		c.zeroHeaders(ctx, sent, r.Tombstones)
	}
	return errs
}

// One master call of a batch carries at most maxBatchKeys keys of at most
// maxBatchKeyBytes in all: its request and its answer (an object's replica
// list is ~100 bytes a replica) stay far below gRPC's 4 MiB message limit
// whatever the caller passes, and each span's leases start when its reads
// do, so a batch of any size cannot outlive its leases.
const (
	maxBatchKeys     = 2048
	maxBatchKeyBytes = 1 << 20
)

// batchSpans splits keys into consecutive [from, to) spans within the
// bounds of one master call.
func batchSpans(keys []string) [][2]int {
	var spans [][2]int
	from, bytes := 0, 0
	for i, k := range keys {
		if i > from && (i-from == maxBatchKeys || bytes+len(k) > maxBatchKeyBytes) {
			spans = append(spans, [2]int{from, i})
			from, bytes = i, 0
		}
		bytes += len(k)
	}
	return append(spans, [2]int{from, len(keys)})
}
