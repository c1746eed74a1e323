package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/model"
)

var (
	tinyOnce  sync.Once
	tinyModel *model.Model
)

func tiny(t testing.TB) *model.Model {
	tinyOnce.Do(func() {
		m, err := model.NewBuiltin("tiny", 1)
		if err != nil {
			panic(err)
		}
		tinyModel = m
	})
	return tinyModel
}

func newEngine(t testing.TB, mod func(*Config)) *Engine {
	t.Helper()
	cfg := Config{Model: tiny(t), NumBlocks: 256, MaxNumBatchedTokens: 512}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// runInBackground runs e.Run until the returned stop is called; stop
// returns once Run has.
func runInBackground(e *Engine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	return func() {
		cancel()
		<-done
	}
}

func prompt(n, salt int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = (i*31 + salt*17 + i*i%7) % 256
	}
	return p
}

type result struct {
	tokens []int
	final  Output
}

// runToEnd steps e until every request has finished and no blocks wait
// for the connector, then collects every stream.
func runToEnd(t testing.TB, e *Engine, streams []*Stream) []result {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		if i > 100000 {
			t.Fatal("engine did not finish")
		}
		e.Step(ctx)
		s := e.Stats()
		if s.Running+s.Waiting+s.WaitingForRemote+s.DelayedFree == 0 {
			e.mu.Lock()
			n := len(e.inbox)
			e.mu.Unlock()
			if n == 0 {
				break
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := make([]result, len(streams))
	for i, s := range streams {
		toks, final, err := s.Collect(ctx)
		if err != nil {
			t.Fatalf("stream %s: %v", s.ID(), err)
		}
		out[i] = result{toks, final}
	}
	return out
}

func submit(t testing.TB, e *Engine, reqs ...Request) []*Stream {
	t.Helper()
	var ss []*Stream
	for _, r := range reqs {
		s, err := e.Submit(r)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	return ss
}

func greedy(id string, p []int, max int) Request {
	return Request{ID: id, Prompt: p, Params: SamplingParams{MaxTokens: max, IgnoreEOS: true}}
}

// mapConnector saves full prompt blocks to a shared map in SaveKVLayer and
// loads them back (synchronously inside the forward, or asynchronously and
// reported through GetFinished). It can inject load failures and delay frees.
type mapConnector struct {
	store *blockStore
	async bool
	save  bool
	load  bool
	// delayFree keeps finished requests' blocks until the given number of
	// GetFinished calls later.
	delayFree int
	// failLoads makes loads of these block indexes (within a request) fail.
	failLoads map[int]bool

	kv      KVCaches
	regions *kvcache.Regions
	pending map[string]*loadJob // after UpdateStateAfterAlloc
	meta    *mapMeta
	doneRcv []string
	invalid []int
	sending map[string]int
	calls   []string
}

type blockStore struct {
	mu     sync.Mutex
	blocks map[kvcache.BlockHash][][]byte // per layer
}

func newStore() *blockStore { return &blockStore{blocks: map[kvcache.BlockHash][][]byte{}} }

type loadJob struct {
	id     string
	blocks []int
	hashes []kvcache.BlockHash
	first  int // block index of the first loaded block
}

type saveJob struct {
	blocks []int
	hashes []kvcache.BlockHash
}

type mapMeta struct {
	loads []*loadJob
	saves []saveJob
}

func (c *mapConnector) log(s string) { c.calls = append(c.calls, s) }

func (c *mapConnector) GetNumNewMatchedTokens(req *ReqState, numLocal int) (int, bool, error) {
	c.log("match")
	if !c.load {
		return 0, false, nil
	}
	bs := c.kv.Layout.BlockSize
	hashes := kvcache.HashBlocks(req.CacheSalt(), bs, req.PromptTokens())
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	n := 0
	for i := numLocal / bs; i < len(hashes); i++ {
		if _, ok := c.store.blocks[hashes[i]]; !ok {
			break
		}
		n += bs
	}
	return n, c.async && n > 0, nil
}

func (c *mapConnector) UpdateStateAfterAlloc(req *ReqState, blockIDs []int, n int) {
	c.log("alloc")
	if n == 0 {
		return
	}
	bs := c.kv.Layout.BlockSize
	hashes := req.BlockHashes()
	if want := kvcache.HashBlocks(req.CacheSalt(), bs, req.AllTokens()); len(hashes) != len(want) || (len(want) > 0 && hashes[len(want)-1] != want[len(want)-1]) {
		panic("BlockHashes does not match the spec")
	}
	first, cnt := req.NumComputedTokens()/bs, n/bs
	if c.pending == nil {
		c.pending = map[string]*loadJob{}
	}
	c.pending[req.ID()] = &loadJob{id: req.ID(), blocks: blockIDs[first : first+cnt], hashes: hashes[first : first+cnt], first: first}
}

func (c *mapConnector) BuildConnectorMeta(out *SchedulerOutput) any {
	c.log("meta")
	m := &mapMeta{}
	for _, j := range c.pending {
		m.loads = append(m.loads, j)
	}
	slices.SortFunc(m.loads, func(a, b *loadJob) int {
		if a.id < b.id {
			return -1
		}
		return 1
	})
	c.pending = nil
	if c.save {
		bs := c.kv.Layout.BlockSize
		for _, s := range out.Scheduled {
			r := s.Req
			end := s.NumComputedTokens + s.NumScheduledTokens
			end = min(end, len(r.PromptTokens()))
			lo, hi := s.NumComputedTokens/bs, end/bs
			if hi <= lo {
				continue
			}
			hashes := kvcache.HashBlocks(r.CacheSalt(), bs, r.PromptTokens()[:hi*bs])
			m.saves = append(m.saves, saveJob{blocks: s.BlockIDs[lo:hi], hashes: hashes[lo:hi]})
		}
	}
	return m
}

func (c *mapConnector) UpdateConnectorOutput(ConnectorOutput) { c.log("output") }

func (c *mapConnector) RequestFinished(req *ReqState, blockIDs []int) (bool, map[string]any) {
	c.log("finished")
	if req.FinishReason() == "" || req.Status() != StatusFinished {
		panic("RequestFinished before the finish reason is set")
	}
	if c.delayFree > 0 && len(blockIDs) > 0 {
		if c.sending == nil {
			c.sending = map[string]int{}
		}
		c.sending[req.ID()] = c.delayFree
		return true, map[string]any{"saved_blocks": len(blockIDs)}
	}
	return false, nil
}

func (c *mapConnector) RegisterKVCaches(kv KVCaches) error {
	r, err := kv.Regions()
	c.kv, c.regions = kv, r
	c.log("register")
	return err
}
func (c *mapConnector) BindConnectorMeta(meta any) { c.meta = meta.(*mapMeta); c.log("bind") }

func (c *mapConnector) copyIn(j *loadJob, layer int) {
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	for i, id := range j.blocks {
		if c.failLoads[j.first+i] {
			junk := make([]byte, c.kv.Layout.FullBlockBytes())
			for k := range junk {
				junk[k] = 0x7f
			}
			_ = c.regions.WriteBlock(layer, id, junk)
			continue
		}
		_ = c.regions.WriteBlock(layer, id, c.store.blocks[j.hashes[i]][layer])
	}
}

func (c *mapConnector) StartLoadKV(ctx context.Context) error {
	c.log("start")
	if c.async {
		for _, j := range c.meta.loads {
			for l := range c.kv.Layout.NumLayers {
				c.copyIn(j, l)
			}
			c.finishLoad(j)
		}
	}
	return nil
}

func (c *mapConnector) finishLoad(j *loadJob) {
	c.doneRcv = append(c.doneRcv, j.id)
	for i, id := range j.blocks {
		if c.failLoads[j.first+i] {
			c.invalid = append(c.invalid, id)
		}
	}
}

func (c *mapConnector) WaitForLayerLoad(ctx context.Context, layer int) error {
	c.log(fmt.Sprintf("wait%d", layer))
	if !c.async {
		for _, j := range c.meta.loads {
			c.copyIn(j, layer)
			if layer == c.kv.Layout.NumLayers-1 {
				for i, id := range j.blocks {
					if c.failLoads[j.first+i] {
						c.invalid = append(c.invalid, id)
					}
				}
			}
		}
	}
	return nil
}

func (c *mapConnector) SaveKVLayer(ctx context.Context, layer int) error {
	c.log(fmt.Sprintf("save%d", layer))
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	for _, s := range c.meta.saves {
		for i, id := range s.blocks {
			b := c.store.blocks[s.hashes[i]]
			if b == nil {
				b = make([][]byte, c.kv.Layout.NumLayers)
				c.store.blocks[s.hashes[i]] = b
			}
			b[layer] = c.regions.ReadBlock(nil, layer, id)
		}
	}
	return nil
}

func (c *mapConnector) WaitForSave(ctx context.Context) error { c.log("waitsave"); return nil }

func (c *mapConnector) GetFinished(finished []string) ([]string, []string) {
	c.log("getfinished")
	var sent []string
	for id, n := range c.sending {
		if n <= 1 {
			sent = append(sent, id)
			delete(c.sending, id)
		} else {
			c.sending[id] = n - 1
		}
	}
	rcv := c.doneRcv
	c.doneRcv = nil
	return sent, rcv
}

func (c *mapConnector) GetBlockIDsWithLoadErrors() []int {
	c.log("errors")
	inv := c.invalid
	c.invalid = nil
	return inv
}

func (c *mapConnector) ClearConnectorMeta() { c.meta = nil; c.log("clear") }

var _ Connector = (*mapConnector)(nil)

// holdConnector parks requests whose kv_transfer_params say "hold":
// "pending" keeps them waiting (MatchPending), "remote" admits them as an
// async load that never completes. Nothing else happens.
type holdConnector struct{ NoopConnector }

func (holdConnector) GetNumNewMatchedTokens(req *ReqState, numLocal int) (int, bool, error) {
	switch req.KVTransferParams()["hold"] {
	case "pending":
		return MatchPending, false, nil
	case "remote":
		return len(req.PromptTokens()) - numLocal, true, nil
	}
	return 0, false, nil
}

func held(id, how string) Request {
	r := greedy(id, prompt(40, 7), 4)
	r.KVTransferParams = map[string]any{"hold": how}
	return r
}
