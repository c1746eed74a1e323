package storeconnector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

func checkLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		goleak.VerifyNone(t, ignore,
			goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"),
			goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
	})
}

// cluster is a master and one storage node in this process.
type cluster struct {
	master *masterserver.Server
	node   *storenode.Node
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	m, err := masterserver.Start(masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := storenode.Start(ctx, storenode.Config{Master: m.Addr(), SegmentSize: 64 << 20,
		PingInterval: 20 * time.Millisecond, UnmountGrace: 100 * time.Millisecond})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	c := &cluster{master: m, node: n}
	t.Cleanup(c.stop)
	return c
}

var stopOnce sync.Map

func (c *cluster) stop() {
	if _, done := stopOnce.LoadOrStore(c, true); done {
		return
	}
	c.node.Close()
	c.master.Close()
}

// storeClient opens a transfer engine and a store client; closed at cleanup.
func storeClient(t testing.TB, c *cluster) *store.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	te, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := store.New(ctx, store.Config{Master: c.master.Addr(), Mover: te, LocalBufferSize: 4 << 20,
		PingInterval: 20 * time.Millisecond, RPCTimeout: time.Second, UnmountGrace: 100 * time.Millisecond})
	if err != nil {
		te.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Abort()
		te.Close()
	})
	return cl
}

// node is an engine running with (optionally) a store connector.
type node struct {
	eng  *engine.Engine
	conn *Connector
}

func startEngine(t testing.TB, st Store, mod func(*Config), emod ...func(*engine.Config)) *node {
	t.Helper()
	n := &node{}
	m, err := model.NewBuiltin("tiny", 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Model: m, NumBlocks: 256, MaxNumBatchedTokens: 256}
	if st != nil {
		cc := Config{Store: st, LookupTimeout: 300 * time.Millisecond, LoadTimeout: 5 * time.Second}
		if mod != nil {
			mod(&cc)
		}
		conn, err := New(cc)
		if err != nil {
			t.Fatal(err)
		}
		n.conn = conn
		cfg.Connector = conn
	}
	for _, f := range emod {
		f(&cfg)
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.eng = e
	connCtx, stopConn := context.WithCancel(context.Background())
	connDone := make(chan struct{})
	go func() {
		defer close(connDone)
		if n.conn != nil {
			_ = n.conn.Run(connCtx)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		stopConn()
		<-connDone
	})
	return n
}

func prompt(n, salt int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = (i*31 + salt*17 + i*i%7) % 256
	}
	return p
}

// seeded starts an engine on cluster c's store, runs p on it (max tokens)
// and flushes its saves, so the store holds p's blocks. It returns the
// engine and the tokens it generated.
func seeded(t testing.TB, c *cluster, p []int, max int) (*node, []int) {
	t.Helper()
	a := startEngine(t, storeClient(t, c), nil)
	got, _ := a.generate(t, "a", p, max)
	a.flush(t)
	return a, got
}

func (n *node) generate(t testing.TB, id string, p []int, max int) ([]int, engine.Output) {
	t.Helper()
	s, err := n.eng.Submit(engine.Request{ID: id, Prompt: p, Params: engine.SamplingParams{MaxTokens: max, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	toks, final, err := s.Collect(ctx)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if final.FinishReason != engine.FinishLength {
		t.Fatalf("%s finished with %q (%v)", id, final.FinishReason, final.Err)
	}
	return toks, final
}

// idle waits until the engine holds no blocks for requests (no leak) and
// the connector has nothing in flight.
func (n *node) idle(t testing.TB) {
	t.Helper()
	var s engine.Stats
	if !waitfor.Within(10*time.Second, func() bool {
		s = n.eng.Stats()
		ok := s.BlocksUsed == 0 && s.Running+s.Waiting+s.WaitingForRemote+s.DelayedFree == 0
		if n.conn != nil {
			cs := n.conn.Stats()
			ok = ok && cs.LoadsInFlight == 0 && cs.DelayFreedHeld == 0
		}
		return ok
	}) {
		t.Fatalf("engine not idle (leak?): %+v", s)
	}
}

func (n *node) flush(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.conn.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestPrefixReuseAcrossEngines(t *testing.T) {
	checkLeaks(t)
	c := newCluster(t)
	base := startEngine(t, nil, nil) // colocated reference, no connector

	a := startEngine(t, storeClient(t, c), nil)
	p := prompt(200, 1)
	wantA, _ := base.generate(t, "ref-a", p, 8)
	gotA, _ := a.generate(t, "a", p, 8)
	if !slices.Equal(gotA, wantA) {
		t.Fatalf("engine A with the connector differs from colocated: %v vs %v", gotA, wantA)
	}
	a.flush(t)
	if s := a.conn.Stats(); s.SavedBlocks != 200/16 || s.SaveErrors != 0 || s.DroppedSaves != 0 {
		t.Fatalf("A saved %+v, want %d blocks", s, 200/16)
	}

	// B shares a 160-token prefix (10 blocks) and continues differently.
	b := startEngine(t, storeClient(t, c), nil)
	p2 := append(slices.Clone(p[:160]), prompt(50, 9)...)
	want2, _ := base.generate(t, "ref-b", p2, 8)
	got2, out2 := b.generate(t, "b", p2, 8)
	if !slices.Equal(got2, want2) {
		t.Fatalf("engine B differs from colocated: %v vs %v", got2, want2)
	}
	if s := b.conn.Stats(); s.LoadedTokens != 160 || s.LoadsOK != 1 {
		t.Fatalf("B loaded %+v, want 160 tokens", s)
	}
	if es := b.eng.Stats(); es.ExternalTokens != 160 || out2.NumCachedTokens != 160 {
		t.Fatalf("B external tokens %d cached %d, want 160", es.ExternalTokens, out2.NumCachedTokens)
	}
	// B saved only its own new blocks (13 full blocks, 10 loaded).
	b.flush(t)
	if s := b.conn.Stats(); s.SavedBlocks != 3 {
		t.Fatalf("B saved %d blocks, want 3", s.SavedBlocks)
	}
	// The whole of A's prompt: 12 stored full blocks + local prefix hits.
	got3, _ := b.generate(t, "b2", p, 8)
	if !slices.Equal(got3, wantA) {
		t.Fatalf("B on A's prompt differs: %v vs %v", got3, wantA)
	}
	if s := b.conn.Stats(); s.LoadedTokens != 160+32 {
		t.Fatalf("B loaded %d tokens in total, want 192", s.LoadedTokens)
	}
	a.idle(t)
	b.idle(t)
	base.idle(t)
}

// failingStore wraps a Store and fails BatchGet of the keys after the
// first failFrom of each call (or every call when failAll).
type failingStore struct {
	Store
	failFrom int
	gets     atomic.Int64
}

func (f *failingStore) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	f.gets.Add(1)
	vals, errs := f.Store.BatchGet(ctx, keys)
	for i := f.failFrom; i < len(errs); i++ {
		errs[i], vals[i] = errors.New("injected read failure"), nil
	}
	return vals, errs
}

func TestLoadFailureRecomputes(t *testing.T) {
	checkLeaks(t)
	c := newCluster(t)
	p := prompt(130, 3)
	a, want := seeded(t, c, p, 6)

	fs := &failingStore{Store: storeClient(t, c), failFrom: 3}
	b := startEngine(t, fs, nil)
	got, _ := b.generate(t, "b", p, 6)
	if !slices.Equal(got, want) {
		t.Fatalf("after a partial load failure: %v vs %v", got, want)
	}
	s := b.conn.Stats()
	if fs.gets.Load() != 1 || s.LoadsFailed != 1 || s.LoadedTokens != 3*16 {
		t.Fatalf("gets %d stats %+v", fs.gets.Load(), s)
	}
	// B computed everything from the first failed block on.
	if es := b.eng.Stats(); es.PromptTokens != 130-3*16 {
		t.Fatalf("B computed %d prompt tokens, want %d", es.PromptTokens, 130-3*16)
	}
	a.idle(t)
	b.idle(t)
}

func TestStoreGoneRecomputes(t *testing.T) {
	checkLeaks(t)
	c := newCluster(t)
	p := prompt(100, 4)
	a, want := seeded(t, c, p, 6)

	b := startEngine(t, storeClient(t, c), func(cc *Config) { cc.LookupTimeout = 100 * time.Millisecond; cc.SaveTimeout = 500 * time.Millisecond })
	c.stop() // master and storage node go away
	for i, pp := range [][]int{p, prompt(70, 5)} {
		got, _ := b.generate(t, "b"+string(rune('0'+i)), pp, 6)
		if i == 0 && !slices.Equal(got, want) {
			t.Fatalf("without the store: %v vs %v", got, want)
		}
	}
	s := b.conn.Stats()
	if s.LookupErrors == 0 || s.LoadedTokens != 0 {
		t.Fatalf("stats %+v: want a lookup error and nothing loaded", s)
	}
	if es := b.eng.Stats(); es.ExternalTokens != 0 || es.PromptTokens != 170 {
		t.Fatalf("B engine stats %+v", es)
	}
	b.flush(t) // saves fail within SaveTimeout; the engine is unaffected
	if s := b.conn.Stats(); s.SaveErrors == 0 || s.SavedBlocks != 0 {
		t.Fatalf("saves to a gone store: %+v", s)
	}
	a.idle(t)
	b.idle(t)
}

func TestAbortDuringLoad(t *testing.T) {
	checkLeaks(t)
	c := newCluster(t)
	p := prompt(120, 6)
	a, _ := seeded(t, c, p, 2)

	bs := &blockingStore{Store: storeClient(t, c), entered: make(chan struct{}, 1)}
	b := startEngine(t, bs, nil)
	s, err := b.eng.Submit(engine.Request{ID: "b", Prompt: p, Params: engine.SamplingParams{MaxTokens: 4, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-bs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("load never started")
	}
	b.eng.Abort("b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, final, err := s.Collect(ctx)
	if err != nil || final.FinishReason != engine.FinishAbort {
		t.Fatalf("abort: %q %v", final.FinishReason, err)
	}
	b.idle(t)
	if st := b.conn.Stats(); st.AbortedLoads != 1 || st.LoadedTokens != 0 {
		t.Fatalf("stats after abort: %+v", st)
	}
	a.idle(t)
}

// blockingStore's BatchGet blocks until its ctx ends.
type blockingStore struct {
	Store
	entered chan struct{}
}

func (b *blockingStore) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	b.entered <- struct{}{}
	<-ctx.Done()
	errs := make([]error, len(keys))
	for i := range errs {
		errs[i] = ctx.Err()
	}
	return make([][]byte, len(keys)), errs
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"no store", Config{}, false},
		{"negative timeout", Config{Store: &failingStore{}, LookupTimeout: -1}, false},
		{"negative queue", Config{Store: &failingStore{}, SaveQueue: -1}, false},
		{"ok", Config{Store: &failingStore{}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}

// TestConcurrentRequestsAndSalt: several requests sharing a stored prefix
// load it at once; a request with another cache_salt loads nothing.
func TestConcurrentRequestsAndSalt(t *testing.T) { concurrentRequestsAndSalt(t, nil) }

// concurrentRequestsAndSalt runs TestConcurrentRequestsAndSalt with B's
// connector configured by mod.
func concurrentRequestsAndSalt(t *testing.T, mod func(*Config)) {
	checkLeaks(t)
	c := newCluster(t)
	base := startEngine(t, nil, nil)
	shared := prompt(96, 7)
	a, _ := seeded(t, c, shared, 2)

	b := startEngine(t, storeClient(t, c), mod)
	var prompts [][]int
	for i := range 4 {
		prompts = append(prompts, append(slices.Clone(shared), prompt(20+i*9, 20+i)...))
	}
	var streams []*engine.Stream
	for i, p := range prompts {
		s, err := b.eng.Submit(engine.Request{ID: fmt.Sprint("b", i), Prompt: p, Params: engine.SamplingParams{MaxTokens: 5, IgnoreEOS: true}})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, s := range streams {
		got, _, err := s.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := base.generate(t, fmt.Sprint("ref", i), prompts[i], 5)
		if !slices.Equal(got, want) {
			t.Fatalf("request %d: %v vs %v", i, got, want)
		}
	}
	// Every request admitted in the first step loads the 6 shared blocks
	// (later ones may find them in B's local prefix cache instead).
	if s := b.conn.Stats(); s.LoadedTokens == 0 || s.LoadedTokens%96 != 0 || s.LoadsFailed != 0 {
		t.Fatalf("B stats %+v", s)
	}
	before := b.conn.Stats().LoadedTokens
	s, err := b.eng.Submit(engine.Request{ID: "salted", Prompt: shared, CacheSalt: "tenant-b", Params: engine.SamplingParams{MaxTokens: 2, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, final, err := s.Collect(ctx); err != nil || final.NumCachedTokens != 0 {
		t.Fatalf("salted request: cached %d err %v", final.NumCachedTokens, err)
	}
	if got := b.conn.Stats().LoadedTokens; got != before {
		t.Fatalf("a salted request loaded %d tokens", got-before)
	}
	a.idle(t)
	b.idle(t)
	base.idle(t)
}

// gateStore blocks BatchExist until gate is closed.
type gateStore struct {
	Store
	gate    chan struct{}
	entered chan struct{} // one signal per call, dropped when full
}

func (g *gateStore) BatchExist(ctx context.Context, keys []string) ([]bool, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Store.BatchExist(ctx, keys)
}

// TestSaveQueueBounded: with the save worker stuck, one batch waits in the
// queue and later ones are dropped; the engine keeps serving, and once the
// store answers again the queued batch is saved.
func TestSaveQueueBounded(t *testing.T) {
	checkLeaks(t)
	c := newCluster(t)
	g := &gateStore{Store: storeClient(t, c), gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	a := startEngine(t, g, func(cc *Config) { cc.SaveQueue = 1; cc.NoLoad = true })
	for i := range 4 {
		a.generate(t, fmt.Sprint("a", i), prompt(40, 30+i), 2) // 2 full blocks each, one step each
		if i == 0 {                                            // the worker holds the first batch: the queue is empty again
			select {
			case <-g.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("save worker never called the store")
			}
		}
	}
	s := a.conn.Stats()
	if s.DroppedSaves != 2 || s.SavesQueued != 2 {
		t.Fatalf("stats with a stuck store: %+v", s)
	}
	close(g.gate)
	a.flush(t)
	if s := a.conn.Stats(); s.SavedBlocks != 4 || s.SavesQueued != 0 {
		t.Fatalf("after the store came back: %+v", s)
	}
	a.idle(t)
}

// TestBlocksAcrossTP: blocks are stored in their TP-independent form under
// a key without the TP size, so a TP 2 engine loads what a TP 4 engine
// saved (model tiny-tp, 4 KV heads) and generates the colocated TP 1
// output.
func TestBlocksAcrossTP(t *testing.T) {
	checkLeaks(t)
	c := newCluster(t)
	m, err := model.NewBuiltin("tiny-tp", 1)
	if err != nil {
		t.Fatal(err)
	}
	withTP := func(tp int) func(*engine.Config) { return func(e *engine.Config) { e.Model, e.TP = m, tp } }
	base := startEngine(t, nil, nil, withTP(1))
	p := prompt(100, 3)
	want, _ := base.generate(t, "ref", p, 8)
	a := startEngine(t, storeClient(t, c), nil, withTP(4))
	if got, _ := a.generate(t, "a", p, 8); !slices.Equal(got, want) {
		t.Fatalf("tp 4 engine differs from colocated tp 1: %v vs %v", got, want)
	}
	a.flush(t)
	b := startEngine(t, storeClient(t, c), nil, withTP(2))
	got, out := b.generate(t, "b", p, 8)
	if !slices.Equal(got, want) {
		t.Fatalf("tp 2 engine loading tp 4's blocks differs from colocated: %v vs %v", got, want)
	}
	if s := b.conn.Stats(); s.LoadedTokens != 96 || out.NumCachedTokens != 96 {
		t.Fatalf("tp 2 engine loaded %+v (cached %d), want 96 tokens", s, out.NumCachedTokens)
	}
	a.idle(t)
	b.idle(t)
	base.idle(t)
}
