package store_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// cluster is an in-process store: a master on loopback, storage nodes with
// real transfer engines (TCP on 127.0.0.1) and clients.
type cluster struct {
	t      testing.TB
	master *masterserver.Server
	mcfg   masterserver.ServerConfig
	nodes  []*storenode.Node
	// transport of every engine: "" (auto: shared memory for same-host
	// segments) or "tcp". Set before adding nodes and clients.
	transport string
}

func newCluster(t *testing.T, core master.Config, nodes int, segSize uint64) *cluster {
	t.Helper()
	return newClusterTB(t, core, nodes, segSize)
}

func newClusterTB(t testing.TB, core master.Config, nodes int, segSize uint64) *cluster {
	t.Helper()
	return newClusterTransport(t, core, nodes, segSize, "")
}

func newClusterTransport(t testing.TB, core master.Config, nodes int, segSize uint64, transport string) *cluster {
	t.Helper()
	c := &cluster{t: t, transport: transport, mcfg: masterserver.ServerConfig{Core: core, Addr: "127.0.0.1:0", HTTPAddr: "", TickInterval: 5 * time.Millisecond}}
	var err error
	c.master, err = masterserver.Start(c.mcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.master.Close() })
	for range nodes {
		c.addNode(segSize)
	}
	return c
}

func (c *cluster) addNode(segSize uint64) *storenode.Node {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := storenode.Start(ctx, storenode.Config{Master: c.master.Addr(), SegmentSize: segSize, Engine: transfer.Config{Transport: c.transport},
		PingInterval: 20 * time.Millisecond, UnmountGrace: 200 * time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes = append(c.nodes, n)
	c.t.Cleanup(func() { n.Close() })
	return n
}

// restartMaster stops the master and starts a new, empty one on the same address.
func (c *cluster) restartMaster() {
	c.t.Helper()
	addr := c.master.Addr()
	c.master.Close()
	cfg := c.mcfg
	cfg.Addr = addr
	var err error
	// The port is being released: retry with a deadline.
	if !waitfor.Within(5*time.Second, func() bool { c.master, err = masterserver.Start(cfg); return err == nil }) {
		c.t.Fatal(err)
	}
	// newCluster's cleanup closes c.master after the nodes and clients.
}

func (c *cluster) client(opt func(*store.Config)) *store.Client {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eng, err := transfer.Open(ctx, transfer.Config{Transport: c.transport})
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := store.Config{Master: c.master.Addr(), Mover: eng, LocalBufferSize: 8 << 20, PingInterval: 20 * time.Millisecond}
	if opt != nil {
		opt(&cfg)
	}
	cl, err := store.New(ctx, cfg)
	if err != nil {
		eng.Close()
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		cl.Close()
		eng.Close()
	})
	return cl
}

func value(key string, n int) []byte {
	b := make([]byte, n)
	seed := byte(len(key))
	for i := range key {
		seed = seed*31 + key[i]
	}
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// replicaOffset returns the offset of a replica inside node n's segment.
func replicaOffset(t *testing.T, n *storenode.Node, r store.Replica) int {
	seg := n.Client().Segment()
	off := int(r.Addr - uint64(transfer.AddrOf(seg)))
	if off < 0 || off+int(r.Size) > len(seg) {
		t.Fatalf("replica %+v outside node segment", r)
	}
	return off
}

func nodeOf(c *cluster, r store.Replica) *storenode.Node {
	for _, n := range c.nodes {
		if n.Name() == r.Segment {
			return n
		}
	}
	return nil
}

var _ = fmt.Sprintf
var _ = bytes.Equal
