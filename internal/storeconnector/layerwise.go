package storeconnector

import (
	"context"

	"github.com/kvcache-go/mooncake/internal/kvcache"
)

// Layer-wise loads and saves (Config.Layerwise).
//
// A layer-wise load is synchronous: GetNumNewMatchedTokens answers the
// stored tokens as computed (not async), the engine schedules the rest of
// the prompt in the same step, StartLoadKV starts one goroutine per load
// that reads the blocks (one BatchGet) and copies them into the KV regions
// layer by layer, closing a channel per layer; the forward's
// WaitForLayerLoad(l) waits for layer l of every load of the step (before
// the layer's K/V are written and attention reads the cache). A load that
// fails or times out (LoadTimeout) ends early: its goroutine has stopped
// writing when its done channel closes, the waits return, and its blocks
// that did not land in every layer are reported invalid after the step
// (GetBlockIDsWithLoadErrors): the engine drops the step's work for that
// request and recomputes from the first bad block. WaitForSave, at the end
// of every step, waits for the step's loads, so none outlives its step.
//
// A layer-wise save copies layer l of the blocks the step completes into
// the step's save buffers in SaveKVLayer(l) (called as soon as the layer's
// K/V are stored), and WaitForSave queues the batch once every layer was
// copied (a forward that failed part way saves nothing).

// syncLoad is one request's layer-wise load in the current step.
type syncLoad struct {
	l      *load
	layers []chan struct{} // closed once the layer's blocks are copied
	done   chan struct{}   // closed when the goroutine stopped writing
	cancel context.CancelFunc
}

// startSyncLoads starts the step's layer-wise loads.
func (c *Connector) startSyncLoads() {
	for _, l := range c.meta.loads {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LoadTimeout)
		sl := &syncLoad{l: l, layers: make([]chan struct{}, c.kv.Layout.NumLayers), done: make(chan struct{}), cancel: cancel}
		for i := range sl.layers {
			sl.layers[i] = make(chan struct{})
		}
		c.mu.Lock()
		if c.stopped {
			cancel()
		}
		c.mu.Unlock()
		c.syncLoads = append(c.syncLoads, sl)
		c.wg.Add(1)
		go c.runSyncLoad(ctx, sl)
	}
}

// runSyncLoad reads sl's blocks and copies them layer by layer.
func (c *Connector) runSyncLoad(ctx context.Context, sl *syncLoad) {
	defer c.wg.Done()
	defer close(sl.done)
	defer sl.cancel()
	l := sl.l
	keys := make([]string, len(l.hashes))
	for i, h := range l.hashes {
		keys[i] = c.key(h)
	}
	vals, errs := c.cfg.Store.BatchGet(ctx, keys)
	bb, nl := c.kv.Layout.FullBlockBytes(), c.kv.Layout.NumLayers
	good := make([]bool, len(l.blocks))
	for i := range l.blocks {
		good[i] = i < len(errs) && errs[i] == nil && len(vals[i]) == bb*nl
	}
	copied := 0
	for layer := range nl {
		if ctx.Err() != nil {
			break
		}
		for i, id := range l.blocks {
			if good[i] {
				_ = c.regions.WriteBlock(layer, id, vals[i][layer*bb:(layer+1)*bb]) // the length is checked above
			}
		}
		close(sl.layers[layer])
		copied++
	}
	var bad []int
	loaded := 0
	for i, id := range l.blocks {
		if !good[i] || copied < nl {
			bad = append(bad, id)
			continue
		}
		loaded++
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loadEndedLocked(l, bad, loaded)
}

// waitLayer waits until layer's blocks of every load of the step landed
// (or the load ended early; its blocks are then reported invalid). Each
// wait is bounded by the load's timeout; an ended ctx cancels the step's
// loads and returns once they stopped writing.
func (c *Connector) waitLayer(ctx context.Context, layer int) error {
	for _, sl := range c.syncLoads {
		if layer < 0 || layer >= len(sl.layers) {
			continue
		}
		select {
		case <-sl.layers[layer]:
		case <-sl.done:
		case <-ctx.Done():
			for _, sl := range c.syncLoads {
				sl.cancel()
			}
			c.endStep()
			return ctx.Err()
		}
	}
	return nil
}

// saveLayerCopy copies layer's share of the step's blocks to save.
func (c *Connector) saveLayerCopy(layer int) {
	if c.meta == nil || len(c.meta.saves) == 0 {
		return
	}
	bb, nl := c.kv.Layout.FullBlockBytes(), c.kv.Layout.NumLayers
	if layer == 0 {
		c.saveBufs, c.saveLayer = saveBatch{}, 0
		seen := map[kvcache.BlockHash]bool{}
		for _, s := range c.meta.saves {
			if !seen[s.hash] {
				seen[s.hash] = true
				c.saveBufs.hashes = append(c.saveBufs.hashes, s.hash)
				c.saveBufs.values = append(c.saveBufs.values, make([]byte, bb*nl))
				c.saveBufs.blocks = append(c.saveBufs.blocks, s.block)
			}
		}
	}
	if layer != c.saveLayer || layer >= nl {
		return // a layer skipped: the batch is incomplete and is not saved
	}
	for i, id := range c.saveBufs.blocks {
		c.regions.ReadBlock(c.saveBufs.values[i][layer*bb:layer*bb:(layer+1)*bb], layer, id)
	}
	c.saveLayer++
}

// endStep ends the step's layer-wise work: it waits until the step's loads
// stopped writing (cancelling none that still run: each is bounded by its
// timeout) and queues the step's save if every layer was copied.
func (c *Connector) endStep() {
	for _, sl := range c.syncLoads {
		<-sl.done
	}
	c.syncLoads = nil
	if len(c.saveBufs.hashes) > 0 && c.saveLayer == c.kv.Layout.NumLayers {
		b := c.saveBufs
		b.blocks = nil
		c.queueSave(b)
	}
	c.saveBufs, c.saveLayer = saveBatch{}, 0
}
