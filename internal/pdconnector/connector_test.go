package pdconnector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/transfer"
)

func openTransfer(t *testing.T) *transfer.Engine {
	t.Helper()
	te, err := transfer.Open(t.Context(), transfer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = te.Close() })
	return te
}

// running starts c.Run(ctx, ln) and returns a function that stops it and
// returns Run's error.
func running(t *testing.T, c *Connector, ln net.Listener) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, ln) }()
	stopped := false
	var err error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after its ctx ended")
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func TestNewBindsNothingAndStartsNothing(t *testing.T) {
	te := openTransfer(t)
	before := goleak.IgnoreCurrent()
	c, err := New(Config{Role: RoleProducer, Transfer: te, BootstrapAddr: "10.0.0.1:8998"})
	if err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
	if got := c.BootstrapAddr(); got != "10.0.0.1:8998" {
		t.Fatalf("BootstrapAddr = %q", got)
	}
	if _, err := New(Config{Transfer: te, BootstrapAddr: "no-port"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad bootstrap address: err = %v, want ErrConfig", err)
	}
	if _, err := New(Config{Role: RoleProducer, Transfer: te}); !errors.Is(err, ErrConfig) {
		t.Fatalf("producer without bootstrap address: err = %v, want ErrConfig", err)
	}
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no transfer engine: err = %v, want ErrConfig", err)
	}
}

func TestRunLifecycle(t *testing.T) {
	te := openTransfer(t)
	t.Run("producer serves on ln until ctx ends", func(t *testing.T) {
		ln := listen(t)
		c, err := New(Config{Role: RoleProducer, Transfer: te, BootstrapAddr: ln.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, c, ln)
		var cl bootstrap.Client
		// No worker registered yet: /query answers 503 (an error).
		if _, err := cl.Query(t.Context(), c.BootstrapAddr()); err == nil {
			t.Fatal("query answered before the KV caches were registered")
		}
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if _, err := cl.Query(t.Context(), ln.Addr().String()); err == nil {
			t.Fatal("bootstrap still served after Run returned")
		}
		if c.goTracked(t.Context(), func(context.Context) {}) {
			t.Fatal("work started after Run returned")
		}
	})
	t.Run("producer needs a listener", func(t *testing.T) {
		c, err := New(Config{Role: RoleProducer, Transfer: te, BootstrapAddr: "127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Run(t.Context(), nil); !errors.Is(err, ErrConfig) {
			t.Fatalf("err = %v, want ErrConfig", err)
		}
	})
	t.Run("consumer without listener", func(t *testing.T) {
		c, err := New(Config{Role: RoleConsumer, Transfer: te})
		if err != nil {
			t.Fatal(err)
		}
		stop := running(t, c, nil)
		if c.BootstrapAddr() != "" {
			t.Fatalf("BootstrapAddr = %q", c.BootstrapAddr())
		}
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
	t.Run("StartLoadKV honours its ctx", func(t *testing.T) {
		c, err := New(Config{Role: RoleConsumer, Transfer: te})
		if err != nil {
			t.Fatal(err)
		}
		c.BindConnectorMeta([]PullSpec{{ReqID: "r", TransferID: "x", Bootstrap: "127.0.0.1:1"}})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := c.StartLoadKV(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		c.lifeMu.Lock()
		n := len(c.cancels)
		c.lifeMu.Unlock()
		if n != 0 {
			t.Fatalf("%d pulls started with a cancelled ctx", n)
		}
	})
}

var testLayout = kvcache.Layout{NumLayers: 2, NumBlocks: 8, BlockSize: 4, NumKVHeads: 4, HeadDim: 8}

// kvFor allocates the KV regions of a tp-rank engine through c's
// allocator, fills them with bytes from seed, registers them and returns
// them.
func kvFor(t *testing.T, c *Connector, seed byte, tp int) *kvcache.Regions {
	t.Helper()
	l := testLayout
	l.TP = tp
	ranks := make([][][]byte, tp)
	for r := range ranks {
		for i := range l.NumLayers {
			b, err := c.Allocator()(l.LayerBytes())
			if err != nil {
				t.Fatal(err)
			}
			for j := range b {
				b[j] = seed + byte(j*7+i+r*31)
			}
			ranks[r] = append(ranks[r], b)
		}
	}
	compat := kvcache.Compat{Model: "m", DType: "float32", NumLayers: 2, NumKVHeads: 4, HeadDim: 8, BlockSize: 4}
	if err := c.RegisterKVCaches(engine.KVCaches{Layout: l, Compat: compat, Ranks: ranks}); err != nil {
		t.Fatal(err)
	}
	regions, err := kvcache.Wrap(l, ranks)
	if err != nil {
		t.Fatal(err)
	}
	return regions
}

// TestPullBetweenConnectors: a decode connector pulls a finished prefill's
// blocks from a producer connector through its Run-served bootstrap port,
// for every prefill TP p and decode TP q in {1, 2, 4}: each decode rank
// gets exactly its heads, nothing else is written, and the number of write
// requests is one per layer and rank for p == q (one run of blocks) and one
// per block per overlapping (prefill rank, decode rank) pair otherwise; the
// producer prepares the transfer engine for the decode peer first.
func TestPullBetweenConnectors(t *testing.T) {
	for _, p := range []int{1, 2, 4} {
		for _, q := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("tp%d-to-tp%d", p, q), func(t *testing.T) { testPullTP(t, p, q) })
		}
	}
}

func testPullTP(t *testing.T, p, q int) {
	ln := listen(t)
	pre, err := New(Config{Role: RoleProducer, Transfer: openTransfer(t), BootstrapAddr: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	stopPre := running(t, pre, ln)
	dec, err := New(Config{Role: RoleConsumer, Transfer: openTransfer(t)})
	if err != nil {
		t.Fatal(err)
	}
	stopDec := running(t, dec, nil)
	src := kvFor(t, pre, 1, p)
	dst := kvFor(t, dec, 100, q)

	pre.mu.Lock()
	pre.prod.Finished("xfer-1", "req-1", []int{0, 1, 2}, 10, true, pre.clock.Now())
	pre.prod.SetAux("xfer-1", bootstrap.Aux{FirstToken: 42, FirstLogprob: -0.25})
	pre.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	resp, err := dec.pull(ctx, PullSpec{ReqID: "req-1", TransferID: "xfer-1", Bootstrap: pre.BootstrapAddr(),
		EngineID: pre.EngineID(), NumTokens: 10, FirstBlock: 0, BlockIDs: []int{5, 6, 7}})
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	// One request per layer: with equal TP each rank's run of 3 blocks
	// is one extent, otherwise every block's head range of every
	// overlapping rank pair is.
	wantReqs := testLayout.NumLayers
	if resp.Status != bootstrap.StatusDone || resp.Blocks != 3 || resp.Requests != wantReqs ||
		resp.Bytes != int64(3*testLayout.NumLayers*testLayout.FullBlockBytes()) {
		t.Fatalf("pull answered %+v, want %d requests", resp, wantReqs)
	}
	if resp.Aux == nil || *resp.Aux != (bootstrap.Aux{FirstToken: 42, FirstLogprob: -0.25}) {
		t.Fatalf("aux data (the first token and its logprob) %+v", resp.Aux)
	}
	for l := range testLayout.NumLayers {
		for i := range 3 {
			if !bytes.Equal(dst.ReadBlock(nil, l, 5+i), src.ReadBlock(nil, l, i)) {
				t.Fatalf("layer %d: decode block %d differs from prefill block %d", l, 5+i, i)
			}
		}
		if bytes.Equal(dst.ReadBlock(nil, l, 4), src.ReadBlock(nil, l, 4)) {
			t.Fatalf("layer %d: block 4 written", l)
		}
	}
	pre.mu.Lock()
	prepared := pre.prepared[dec.te.Name()]
	pre.mu.Unlock()
	if !prepared {
		t.Fatal("the producer did not prepare the transfer engine for the decode peer")
	}
	if err := stopDec(); err != nil {
		t.Fatal(err)
	}
	if err := stopPre(); err != nil {
		t.Fatal(err)
	}
}

// TestPullRefusesUnmappableTP: a decode TP that does not divide the KV
// heads, another block layout, or a block stride that does not match
// decode's TP are refused as incompatible, with the reason.
func TestPullRefusesUnmappableTP(t *testing.T) {
	pre, err := New(Config{Role: RoleProducer, Transfer: openTransfer(t), BootstrapAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	kvFor(t, pre, 1, 2)
	base := bootstrap.PullRequest{TransferID: "x", ProtocolVersion: bootstrap.ProtocolVersion, CompatHash: pre.compat,
		TPSize: 2, TPRanks: 2, KVLayout: kvcache.BlockLayout, Segment: "s", LayerAddrs: []uint64{1, 2, 3, 4},
		BlockBytes: 2 * testLayout.HeadBytes(), NumTokens: 4, BlockIDs: []int{0}, TimeoutMS: 1000}
	for _, tc := range []struct {
		name, want string
		mod        func(*bootstrap.PullRequest)
	}{
		{"tp 3", "does not divide the 4 KV heads", func(r *bootstrap.PullRequest) { r.TPSize, r.TPRanks = 3, 1 }},
		{"layout", "KV layout", func(r *bootstrap.PullRequest) { r.KVLayout = "token-major" }},
		{"stride", "bytes", func(r *bootstrap.PullRequest) { r.BlockBytes = testLayout.HeadBytes() }},
		{"ranks", "layer regions", func(r *bootstrap.PullRequest) { r.LayerAddrs = r.LayerAddrs[:2] }},
	} {
		req := base
		tc.mod(&req)
		resp := pre.Pull(t.Context(), req)
		if resp.Status != bootstrap.StatusFailed || resp.Code != bootstrap.CodeIncompatible || !strings.Contains(resp.Error, tc.want) {
			t.Fatalf("%s: %+v, want incompatible naming %q", tc.name, resp, tc.want)
		}
	}
}

// fenceRecorder is a transfer engine that records its fences.
type fenceRecorder struct {
	*transfer.Engine
	mu     sync.Mutex
	fenced [][]string
}

func (f *fenceRecorder) FenceFrom(ctx context.Context, peers ...string) (int, error) {
	f.mu.Lock()
	f.fenced = append(f.fenced, peers)
	f.mu.Unlock()
	return f.Engine.FenceFrom(ctx, peers...)
}

// TestSilentPrefillIsFenced: a pull that gets no answer (prefill's
// bootstrap takes the pull and never answers, as across a partition)
// fails at PullTimeout, and before the blocks can go back to the pool the
// prefill's data lanes into decode are fenced; a pull that gets an answer
// fences nothing.
func TestSilentPrefillIsFenced(t *testing.T) {
	ln := listen(t)
	pre, err := New(Config{Role: RoleProducer, Transfer: openTransfer(t), BootstrapAddr: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	running(t, pre, ln)
	rec := &fenceRecorder{Engine: openTransfer(t)}
	dec, err := New(Config{Role: RoleConsumer, Transfer: rec, PullTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	running(t, dec, nil)
	kvFor(t, pre, 1, 1)
	kvFor(t, dec, 100, 1)

	// The silent prefill: its registry answers, its pulls never do.
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/pull" {
			_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client leave
			<-r.Context().Done()
			return
		}
		resp, err := http.Get("http://" + pre.BootstrapAddr() + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	defer silent.Close()
	spec := PullSpec{ReqID: "req-1", TransferID: "xfer-1", Bootstrap: strings.TrimPrefix(silent.URL, "http://"),
		EngineID: pre.EngineID(), NumTokens: 10, FirstBlock: 0, BlockIDs: []int{5, 6, 7}}
	ctx, cancel := context.WithTimeout(t.Context(), dec.cfg.PullTimeout)
	defer cancel()
	if _, err := dec.pull(ctx, spec); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("pull from a silent prefill: %v, want a timeout", err)
	}
	rec.mu.Lock()
	got := rec.fenced
	rec.mu.Unlock()
	if len(got) != 1 || len(got[0]) != 1 || got[0][0] != pre.te.Name() {
		t.Fatalf("fences %v, want one of [%s]", got, pre.te.Name())
	}
	var m dto.Metric
	if err := dec.m.fences.Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("mooncake_pd_kv_fences_total = %v (%v)", m.GetCounter().GetValue(), err)
	}

	// An answered failure (no such transfer) fences nothing.
	spec.Bootstrap = pre.BootstrapAddr()
	ctx2, cancel2 := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel2()
	if _, err := dec.pull(ctx2, spec); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("pull of an unknown transfer: %v, want refused", err)
	}
	rec.mu.Lock()
	n := len(rec.fenced)
	rec.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d fences after an answered failure, want still 1", n)
	}
}

// TestSideChannelClosesWithReset: the connector's bootstrap connections
// have SO_LINGER 0, so a pull decode gave up on is reset, never delivered
// after a partition heals.
func TestSideChannelClosesWithReset(t *testing.T) {
	ln := listen(t)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	c, err := dialAbortive(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var l *unix.Linger
	var gerr error
	if err := raw.Control(func(fd uintptr) { l, gerr = unix.GetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if l.Onoff != 1 || l.Linger != 0 {
		t.Fatalf("SO_LINGER %+v, want on with 0 s (close resets)", *l)
	}
}
