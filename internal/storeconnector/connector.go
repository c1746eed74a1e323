package storeconnector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/store"
)

// Store is the part of the store client the connector uses; *store.Client
// implements it. Tests wrap it to inject faults.
type Store interface {
	BatchExist(ctx context.Context, keys []string) ([]bool, error)
	BatchPut(ctx context.Context, keys []string, values [][]byte, o store.PutOptions) []error
	BatchGet(ctx context.Context, keys []string) ([][]byte, []error)
}

var _ Store = (*store.Client)(nil)

// ErrInvalid wraps configuration errors.
var ErrInvalid = errors.New("storeconnector: invalid config")

// Config configures a Connector.
type Config struct {
	Store Store // the store client (required)
	// KeyPrefix starts every key ("mooncake/kv/").
	KeyPrefix string
	// Save and Load switch the two directions (both on by default; set
	// NoSave / NoLoad to turn one off).
	NoSave, NoLoad bool
	// LookupTimeout bounds the BatchExist of GetNumNewMatchedTokens, which
	// runs on the engine's step goroutine (200ms).
	LookupTimeout time.Duration
	// LoadTimeout bounds one request's asynchronous load (10s).
	LoadTimeout time.Duration
	// SaveTimeout bounds one save batch (10s).
	SaveTimeout time.Duration
	// SaveQueue is how many save batches (one per step) may wait; a step
	// whose batch does not fit is not saved (counted as dropped) (64).
	SaveQueue int
	// Backoff is how long lookups are skipped after a store error, so a
	// store that went away costs one timeout, not one per request (1s).
	Backoff time.Duration
	// Replicas of each saved object (0 = the client's default).
	Replicas int
	// Layerwise loads a request's stored blocks during the step that
	// computes the rest of its prompt, layer by layer: the forward waits
	// per layer (WaitForLayerLoad) only for that layer's copy, the read
	// overlaps with the first layer's projections and the copies of later
	// layers with the compute of earlier ones. Saves copy each layer out as
	// soon as it is computed (SaveKVLayer). Off (the default), a request
	// waits for its whole load in WAITING_FOR_REMOTE_KVS before any compute
	// and saves are copied once per step (WaitForSave); see
	// docs/store-connector.md for the trade-off.
	Layerwise bool
	Logger    *slog.Logger
	Clock     clock.Clock // the real clock by default
}

func (c Config) withDefaults() Config {
	if c.KeyPrefix == "" {
		c.KeyPrefix = "mooncake/kv/"
	}
	if c.LookupTimeout == 0 {
		c.LookupTimeout = 200 * time.Millisecond
	}
	if c.LoadTimeout == 0 {
		c.LoadTimeout = 10 * time.Second
	}
	if c.SaveTimeout == 0 {
		c.SaveTimeout = 10 * time.Second
	}
	if c.SaveQueue == 0 {
		c.SaveQueue = 64
	}
	if c.Backoff == 0 {
		c.Backoff = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: no store client", ErrInvalid)
	case c.LookupTimeout < 0, c.LoadTimeout < 0, c.SaveTimeout < 0, c.Backoff < 0:
		return fmt.Errorf("%w: negative timeout", ErrInvalid)
	case c.SaveQueue < 0, c.Replicas < 0:
		return fmt.Errorf("%w: negative save_queue or replicas", ErrInvalid)
	}
	return nil
}

// Stats is a snapshot of the connector's counters.
type Stats struct {
	LookupErrors   uint64 // BatchExist failures (answered 0)
	LoadsOK        uint64 // requests whose load completed
	LoadsFailed    uint64 // requests with at least one failed block
	LoadedTokens   uint64 // tokens loaded from the store
	LoadsInFlight  int
	SavedBlocks    uint64 // blocks written to the store
	SkippedBlocks  uint64 // blocks already in the store (not written)
	SaveErrors     uint64 // blocks whose write failed
	DroppedSaves   uint64 // save batches dropped because the queue was full
	SavesQueued    int    // save batches waiting or being written
	AbortedLoads   uint64 // loads stopped by RequestFinished
	KnownInStore   int    // block hashes remembered as saved
	DelayFreedHeld int    // finished requests whose blocks wait for a load to stop
}

// Connector is an engine.Connector backed by the store. Create it with New
// and run Run for as long as the engine runs; end Run after the engine has
// stopped.
type Connector struct {
	cfg   Config
	wg    sync.WaitGroup // loads in flight
	saveq chan saveBatch

	// step-goroutine state
	kv        engine.KVCaches
	regions   *kvcache.Regions // kv's regions: blocks in their TP-independent form
	prefix    string           // KeyPrefix + compat hash + "/"
	pending   []*load
	meta      *stepMeta
	backUntil time.Time
	// layer-wise (Config.Layerwise), this step's:
	syncLoads []*syncLoad
	saveBufs  saveBatch // one buffer per block to save, filled layer by layer
	saveLayer int       // layers copied into saveBufs

	mu         sync.Mutex
	loads      map[string]*load // in flight or finished, not yet reported
	doneRecv   []string
	doneSend   []string
	invalid    []int
	known      map[kvcache.BlockHash]bool // saved (or seen) in the store
	queued     int
	st         Stats
	flushWaitQ []chan struct{}
	stopped    bool // Run ended: no more saves, loads cancelled
}

type load struct {
	id     string
	blocks []int
	hashes []kvcache.BlockHash
	cancel context.CancelFunc
	done   bool
	abort  bool // RequestFinished came while in flight: report in doneSending
}

type saveItem struct {
	block int
	hash  kvcache.BlockHash
}

type stepMeta struct {
	loads []*load
	saves []saveItem
}

type saveBatch struct {
	hashes []kvcache.BlockHash
	values [][]byte
	blocks []int // layer-wise: the KV block of each value, while it is filled
}

var _ engine.Connector = (*Connector)(nil)

// New validates cfg and builds the connector; it starts nothing (Run does).
func New(cfg Config) (*Connector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Connector{cfg: cfg, saveq: make(chan saveBatch, cfg.SaveQueue),
		loads: map[string]*load{}, known: map[kvcache.BlockHash]bool{}}
	return c, nil
}

// Run writes queued saves to the store until ctx ends; then it stops every
// load in flight, waits for them and returns. Queued saves that have not
// started are dropped. End it only after the engine has stopped.
func (c *Connector) Run(ctx context.Context) error {
	c.saveLoop(ctx)
	c.wg.Wait()
	return nil
}

// Stats returns a snapshot.
func (c *Connector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.SavesQueued = c.queued
	s.KnownInStore = len(c.known)
	for _, l := range c.loads {
		if !l.done {
			s.LoadsInFlight++
		}
		if l.abort {
			s.DelayFreedHeld++
		}
	}
	return s
}

// Flush waits until every save queued so far has been written (or failed).
func (c *Connector) Flush(ctx context.Context) error {
	c.mu.Lock()
	if c.queued == 0 || c.stopped {
		c.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	c.flushWaitQ = append(c.flushWaitQ, ch)
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Key is the store key of a block: prefix + compat hash + "/" + block hash.
func Key(prefix string, compat kvcache.Compat, h kvcache.BlockHash) string {
	return prefix + compat.Hash() + "/" + h.String()
}

func (c *Connector) key(h kvcache.BlockHash) string { return c.prefix + h.String() }

// ---- scheduler half ----

// GetNumNewMatchedTokens counts the leading full prompt blocks beyond the
// local hit that the store holds (one BatchExist, bounded by LookupTimeout).
// A store error answers 0: the request computes its prompt.
func (c *Connector) GetNumNewMatchedTokens(req *engine.ReqState, numLocal int) (int, bool, error) {
	if c.cfg.NoLoad || c.prefix == "" {
		return 0, false, nil
	}
	now := c.cfg.Clock.Now()
	if now.Before(c.backUntil) {
		return 0, false, nil
	}
	bs := c.kv.Layout.BlockSize
	prompt := req.PromptTokens()
	first, full := numLocal/bs, len(prompt)/bs
	if full <= first {
		return 0, false, nil
	}
	hashes := req.BlockHashes()[first:full]
	c.mu.Lock()
	n := 0 // leading blocks we know are stored (we saved them)
	for n < len(hashes) && c.known[hashes[n]] {
		n++
	}
	c.mu.Unlock()
	if n < len(hashes) {
		keys := make([]string, len(hashes)-n)
		for i, h := range hashes[n:] {
			keys[i] = c.key(h)
		}
		// Synchronous within the engine's step, which ends before Run.
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LookupTimeout)
		ok, err := c.cfg.Store.BatchExist(ctx, keys)
		cancel()
		if err != nil {
			c.backUntil = now.Add(c.cfg.Backoff)
			c.mu.Lock()
			c.st.LookupErrors++
			c.mu.Unlock()
			c.cfg.Logger.Warn("store lookup failed; computing instead", "req", req.ID(), "err", err)
			return 0, false, nil
		}
		for _, e := range ok {
			if !e {
				break
			}
			n++
		}
	}
	if n == 0 {
		return 0, false, nil
	}
	// Layer-wise loads are synchronous: the blocks land during the step
	// that computes the rest of the prompt.
	return min(n*bs, len(prompt)-numLocal), !c.cfg.Layerwise, nil
}

// UpdateStateAfterAlloc records the load of the external tokens' blocks.
func (c *Connector) UpdateStateAfterAlloc(req *engine.ReqState, blockIDs []int, n int) {
	if n == 0 {
		return
	}
	bs := c.kv.Layout.BlockSize
	first, cnt := req.NumComputedTokens()/bs, n/bs
	l := &load{id: req.ID(), blocks: append([]int(nil), blockIDs[first:first+cnt]...),
		hashes: append([]kvcache.BlockHash(nil), req.BlockHashes()[first:first+cnt]...)}
	c.pending = append(c.pending, l)
}

// BuildConnectorMeta hands the step's new loads and the prompt blocks that
// this step completes (to save) to the worker half.
func (c *Connector) BuildConnectorMeta(out *engine.SchedulerOutput) any {
	m := &stepMeta{loads: c.pending}
	c.pending = nil
	if c.cfg.NoSave || c.prefix == "" {
		return m
	}
	bs := c.kv.Layout.BlockSize
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range out.Scheduled {
		r := s.Req
		end := min(s.NumComputedTokens+s.NumScheduledTokens, len(r.PromptTokens()))
		lo, hi := s.NumComputedTokens/bs, end/bs
		if hi <= lo {
			continue
		}
		hashes := r.BlockHashes()
		for i := lo; i < hi && i < len(hashes) && i < len(s.BlockIDs); i++ {
			if !c.known[hashes[i]] {
				m.saves = append(m.saves, saveItem{block: s.BlockIDs[i], hash: hashes[i]})
			}
		}
	}
	return m
}

// UpdateConnectorOutput does nothing: the connector's state is updated by
// its worker half.
func (c *Connector) UpdateConnectorOutput(engine.ConnectorOutput) {}

// RequestFinished delays the free of a request whose load is still in
// flight (the load is cancelled and reported in doneSending once it has
// stopped writing); saves copy their blocks out during the step, so they
// never hold blocks.
func (c *Connector) RequestFinished(req *engine.ReqState, blockIDs []int) (bool, map[string]any) {
	for i, l := range c.pending { // allocated but not started: drop it
		if l.id == req.ID() {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.loads[req.ID()]
	if !ok {
		return false, nil
	}
	if l.done {
		delete(c.loads, req.ID())
		c.doneRecv = remove(c.doneRecv, req.ID())
		return false, nil
	}
	l.abort = true
	l.cancel()
	c.st.AbortedLoads++
	return true, nil
}

func remove(ids []string, id string) []string {
	for i, x := range ids {
		if x == id {
			return append(ids[:i], ids[i+1:]...)
		}
	}
	return ids
}

// ---- worker half ----

// RegisterKVCaches records the layout; keys are scoped by its compat hash
// (which leaves out the TP size: objects hold blocks in their
// TP-independent form, so engines of any TP share them).
func (c *Connector) RegisterKVCaches(kv engine.KVCaches) error {
	r, err := kv.Regions()
	if err != nil {
		return fmt.Errorf("%w: KV caches do not match their layout: %w", ErrInvalid, err)
	}
	c.kv, c.regions = kv, r
	c.prefix = c.cfg.KeyPrefix + kv.Compat.Hash() + "/"
	return nil
}

// BindConnectorMeta takes the step's metadata.
func (c *Connector) BindConnectorMeta(meta any) { c.meta, _ = meta.(*stepMeta) }

// StartLoadKV starts one goroutine per new load.
func (c *Connector) StartLoadKV(ctx context.Context) error {
	if c.meta == nil {
		return nil
	}
	if c.cfg.Layerwise {
		c.startSyncLoads()
		return nil
	}
	for _, l := range c.meta.loads {
		lctx, cancel := context.WithTimeout(context.Background(), c.cfg.LoadTimeout)
		l.cancel = cancel
		c.mu.Lock()
		c.loads[l.id] = l
		if c.stopped {
			cancel()
		}
		c.mu.Unlock()
		c.wg.Add(1)
		go c.runLoad(lctx, l)
	}
	return nil
}

// runLoad reads the request's blocks (one batch) and copies each into its
// block in every layer region. Blocks that fail are reported as invalid.
func (c *Connector) runLoad(ctx context.Context, l *load) {
	defer c.wg.Done()
	defer l.cancel()
	keys := make([]string, len(l.hashes))
	for i, h := range l.hashes {
		keys[i] = c.key(h)
	}
	vals, errs := c.cfg.Store.BatchGet(ctx, keys)
	bb, nl := c.kv.Layout.FullBlockBytes(), c.kv.Layout.NumLayers
	var bad []int
	loaded := 0
	for i, id := range l.blocks {
		if i >= len(errs) || errs[i] != nil || len(vals[i]) != bb*nl || ctx.Err() != nil {
			bad = append(bad, id)
			continue
		}
		for layer := range nl {
			_ = c.regions.WriteBlock(layer, id, vals[i][layer*bb:(layer+1)*bb]) // the length is checked above
		}
		loaded++
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l.done = true
	if l.abort {
		delete(c.loads, l.id)
		c.doneSend = append(c.doneSend, l.id)
		return
	}
	c.doneRecv = append(c.doneRecv, l.id)
	c.loadEndedLocked(l, bad, loaded)
}

// loadEndedLocked records a load's outcome: its bad blocks are reported
// invalid (the engine recomputes them) and the stats counted.
func (c *Connector) loadEndedLocked(l *load, bad []int, loaded int) {
	c.invalid = append(c.invalid, bad...)
	c.st.LoadedTokens += uint64(loaded * c.kv.Layout.BlockSize)
	if len(bad) > 0 {
		c.st.LoadsFailed++
		c.cfg.Logger.Warn("store load failed for some blocks; recomputing them", "req", l.id, "blocks", len(bad), "of", len(l.blocks))
	} else {
		c.st.LoadsOK++
	}
}

// WaitForLayerLoad returns at once for asynchronous loads; layer-wise, it
// waits until layer's blocks of this step's loads are copied (layerwise.go).
func (c *Connector) WaitForLayerLoad(ctx context.Context, layer int) error {
	if !c.cfg.Layerwise {
		return nil
	}
	return c.waitLayer(ctx, layer)
}

// SaveKVLayer does nothing by default (the blocks are copied out in
// WaitForSave, once every layer of the step is written); layer-wise, it
// copies layer's share of the step's blocks out at once.
func (c *Connector) SaveKVLayer(_ context.Context, layer int) error {
	if c.cfg.Layerwise {
		c.saveLayerCopy(layer)
	}
	return nil
}

// WaitForSave copies the blocks this step completed out of the KV memory
// (one contiguous object per block: layer 0's block, then layer 1's, ...)
// and queues them for the save worker. The copy makes the save safe
// against the blocks being freed and reused; a full queue drops the batch.
func (c *Connector) WaitForSave(context.Context) error {
	if c.cfg.Layerwise {
		c.endStep()
		return nil
	}
	if c.meta == nil || len(c.meta.saves) == 0 {
		return nil
	}
	bb := c.kv.Layout.FullBlockBytes()
	b := saveBatch{}
	seen := map[kvcache.BlockHash]bool{}
	for _, s := range c.meta.saves {
		if seen[s.hash] {
			continue
		}
		seen[s.hash] = true
		v := make([]byte, 0, bb*c.kv.Layout.NumLayers)
		for layer := range c.kv.Layout.NumLayers {
			v = c.regions.ReadBlock(v, layer, s.block)
		}
		b.hashes = append(b.hashes, s.hash)
		b.values = append(b.values, v)
	}
	c.queueSave(b)
	return nil
}

// queueSave hands a batch to the save worker (dropped when the queue is full).
func (c *Connector) queueSave(b saveBatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case c.saveq <- b:
		c.queued++
	default:
		c.st.DroppedSaves++
	}
}

// GetFinished reports finished loads (doneRecving) and stopped loads of
// finished requests (doneSending).
func (c *Connector) GetFinished([]string) (doneSending, doneRecving []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	doneSending, doneRecving = c.doneSend, c.doneRecv
	c.doneSend, c.doneRecv = nil, nil
	for _, id := range doneRecving {
		delete(c.loads, id)
	}
	return doneSending, doneRecving
}

// GetBlockIDsWithLoadErrors returns the blocks whose load failed.
func (c *Connector) GetBlockIDsWithLoadErrors() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	inv := c.invalid
	c.invalid = nil
	return inv
}

// ClearConnectorMeta drops the step's metadata.
func (c *Connector) ClearConnectorMeta() { c.meta = nil }

// ---- save worker ----

const maxKnown = 1 << 16

// saveLoop writes save batches until ctx ends, then drops the rest and
// cancels the loads in flight.
func (c *Connector) saveLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			c.stopped = true
			for _, l := range c.loads {
				if !l.done && l.cancel != nil {
					l.cancel()
				}
			}
		drain:
			for {
				select {
				case <-c.saveq:
					c.queued--
				default:
					break drain
				}
			}
			c.wakeFlushers()
			c.mu.Unlock()
			return
		case b := <-c.saveq:
			c.save(ctx, b)
			c.mu.Lock()
			c.queued--
			c.wakeFlushers()
			c.mu.Unlock()
		}
	}
}

func (c *Connector) wakeFlushers() {
	if c.queued > 0 && !c.stopped {
		return
	}
	for _, ch := range c.flushWaitQ {
		close(ch)
	}
	c.flushWaitQ = nil
}

// save writes the blocks of b that the store does not hold yet.
func (c *Connector) save(ctx context.Context, b saveBatch) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SaveTimeout)
	defer cancel()
	keys := make([]string, len(b.hashes))
	for i, h := range b.hashes {
		keys[i] = c.key(h)
	}
	exist, err := c.cfg.Store.BatchExist(ctx, keys)
	if err != nil {
		c.mu.Lock()
		c.st.SaveErrors += uint64(len(keys))
		c.mu.Unlock()
		c.cfg.Logger.Warn("store save: exist check failed", "blocks", len(keys), "err", err)
		return
	}
	var putKeys []string
	var putVals [][]byte
	var putHashes []kvcache.BlockHash
	skipped := 0
	for i := range keys {
		if i < len(exist) && exist[i] {
			skipped++
			c.remember(b.hashes[i])
			continue
		}
		putKeys, putVals, putHashes = append(putKeys, keys[i]), append(putVals, b.values[i]), append(putHashes, b.hashes[i])
	}
	var errs []error
	if len(putKeys) > 0 {
		errs = c.cfg.Store.BatchPut(ctx, putKeys, putVals, store.PutOptions{Replicas: c.cfg.Replicas})
	}
	saved, failed := 0, 0
	for i, h := range putHashes {
		if i < len(errs) && errs[i] != nil && !errors.Is(errs[i], store.ErrExists) {
			failed++
			continue
		}
		saved++
		c.remember(h)
	}
	c.mu.Lock()
	c.st.SavedBlocks += uint64(saved)
	c.st.SkippedBlocks += uint64(skipped)
	c.st.SaveErrors += uint64(failed)
	c.mu.Unlock()
	if failed > 0 {
		c.cfg.Logger.Warn("store save failed for some blocks", "failed", failed, "of", len(putKeys))
	}
}

// remember notes that the store holds h (a hint only: objects may be
// evicted, in which case a load fails and the engine recomputes).
func (c *Connector) remember(h kvcache.BlockHash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.known) >= maxKnown {
		clear(c.known)
	}
	c.known[h] = true
}
