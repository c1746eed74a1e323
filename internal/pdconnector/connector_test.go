package pdconnector

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

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

var testLayout = kvcache.Layout{NumLayers: 2, NumBlocks: 8, BlockSize: 4, NumKVHeads: 1, HeadDim: 8}

// kvFor allocates the layers through c's allocator, registers them and
// returns them.
func kvFor(t *testing.T, c *Connector, seed byte) [][]byte {
	t.Helper()
	layers := make([][]byte, testLayout.NumLayers)
	for l := range layers {
		b, err := c.Allocator()(testLayout.LayerBytes())
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			b[i] = seed + byte(i*7+l)
		}
		layers[l] = b
	}
	compat := kvcache.Compat{Model: "m", DType: "float32", NumLayers: 2, NumKVHeads: 1, HeadDim: 8, BlockSize: 4}
	if err := c.RegisterKVCaches(engine.KVCaches{Layout: testLayout, Compat: compat, Layers: layers}); err != nil {
		t.Fatal(err)
	}
	return layers
}

// TestPullBetweenConnectors: a decode connector pulls a finished prefill's
// blocks from a producer connector through its Run-served bootstrap port;
// the producer prepares the transfer engine for the decode peer first.
func TestPullBetweenConnectors(t *testing.T) {
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
	src := kvFor(t, pre, 1)
	dst := kvFor(t, dec, 100)

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
	if resp.Status != bootstrap.StatusDone || resp.Blocks != 3 {
		t.Fatalf("pull answered %+v", resp)
	}
	if resp.Aux == nil || *resp.Aux != (bootstrap.Aux{FirstToken: 42, FirstLogprob: -0.25}) {
		t.Fatalf("aux data (the first token and its logprob) %+v", resp.Aux)
	}
	bb := testLayout.BlockBytes()
	for l := range src {
		if !bytes.Equal(dst[l][5*bb:8*bb], src[l][0:3*bb]) {
			t.Fatalf("layer %d: decode blocks 5..7 differ from prefill blocks 0..2", l)
		}
		if bytes.Equal(dst[l][4*bb:5*bb], src[l][4*bb:5*bb]) {
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
