package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/kvcache-go/mooncake/internal/testbed"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// Hosts is the size of the bed a Cluster expects.
const Hosts = 6

// Spec says which roles a Cluster runs.
type Spec struct {
	Stores  int    // storage nodes (0..3) and a master
	Prefill int    // prefill engines (0..2)
	Decode  int    // decode engines (0..2); with Prefill, a proxy too
	Etcd    string // non-empty: two HA masters electing in this etcd (host:port reachable from the bed)
	Segment string // storage node size (default 64MiB)
	// ProxyTimeout is the proxy's --request-timeout (default 10s).
	ProxyTimeout time.Duration
}

// Cluster is the running roles.
type Cluster struct {
	Bed     *testbed.Bed
	Spec    Spec
	Master  string // what clients pass as --master
	Masters []*testbed.Master
	Stores  []*testbed.Store
	Prefill []*testbed.Engine
	Decode  []*testbed.Engine
	Proxy   *testbed.Proxy
	Client  *store.Client // a pure store client in the driver (nil without stores)
	engine  *transfer.Engine
}

// Start lays spec out on bed (which has at least Hosts hosts).
func Start(ctx context.Context, bed *testbed.Bed, spec Spec) (*Cluster, error) {
	if len(bed.Hosts()) < Hosts {
		return nil, fmt.Errorf("chaos: bed has %d hosts, want %d", len(bed.Hosts()), Hosts)
	}
	if spec.Segment == "" {
		spec.Segment = "64MiB"
	}
	if spec.ProxyTimeout == 0 {
		spec.ProxyTimeout = 10 * time.Second
	}
	c := &Cluster{Bed: bed, Spec: spec}
	h := bed.Hosts()
	if spec.Stores > 0 {
		if err := c.startMasters(ctx); err != nil {
			return nil, err
		}
		for i := range spec.Stores {
			s, err := h[1+i].StartStore(ctx, c.Master, spec.Segment, "--ping-interval", "200ms", "--unmount-grace", "200ms")
			if err != nil {
				return nil, err
			}
			c.Stores = append(c.Stores, s)
		}
		eng, err := transfer.Open(ctx, transfer.Config{LocalHostname: bed.RootAddr(), Transport: "tcp"})
		if err != nil {
			return nil, err
		}
		c.engine = eng
		cl, err := store.New(ctx, store.Config{Master: c.Master, Mover: eng, LocalBufferSize: 8 << 20, Replicas: 2,
			RPCTimeout: 3 * time.Second, PingInterval: 200 * time.Millisecond})
		if err != nil {
			eng.Close()
			return nil, err
		}
		c.Client = cl
	}
	for i := range spec.Prefill {
		// a prefill whose decode never pulls frees its blocks after
		// abort_timeout_s (480 s by default)
		e, err := h[1+i].StartServe(ctx, "producer", "--kv-connector-config", `{"abort_timeout_s":5}`)
		if err != nil {
			return nil, err
		}
		c.Prefill = append(c.Prefill, e)
	}
	for i := range spec.Decode {
		e, err := h[3+i].StartServe(ctx, "consumer", "--kv-connector-config", `{"pull_timeout_s":2}`)
		if err != nil {
			return nil, err
		}
		c.Decode = append(c.Decode, e)
	}
	if spec.Prefill > 0 && spec.Decode > 0 {
		if err := c.StartProxy(ctx, h[0]); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// masterFlags: a dead node's segments are dropped after 3 s; read leases
// last 1 s (10 s by default) so that the store load's upserts rarely meet
// one.
var masterFlags = []string{"--client-ttl", "3s", "--lease-ttl", "1s"}

func (c *Cluster) startMasters(ctx context.Context) error {
	h := c.Bed.Hosts()
	if c.Spec.Etcd == "" {
		m, err := h[0].StartMaster(ctx, masterFlags...)
		if err != nil {
			return err
		}
		c.Masters, c.Master = []*testbed.Master{m}, m.GRPC
		return nil
	}
	for _, host := range []*testbed.Host{h[0], h[5]} {
		m, err := host.StartHAMaster(ctx, c.Spec.Etcd, 50051, append([]string{"--ha-lease", "1s"}, masterFlags...)...)
		if err != nil {
			return err
		}
		c.Masters = append(c.Masters, m)
	}
	c.Master = "etcd://" + c.Spec.Etcd
	return nil
}

// StartProxy (re)starts the proxy on host over every prefill and decode
// engine still running.
func (c *Cluster) StartProxy(ctx context.Context, host *testbed.Host) error {
	var pre, dec []string
	for _, e := range c.Prefill {
		if !e.Exited() {
			pre = append(pre, e.Spec())
		}
	}
	for _, e := range c.Decode {
		if !e.Exited() {
			dec = append(dec, e.Spec())
		}
	}
	p, err := host.StartProxy(ctx, pre, dec, "--health-interval", "200ms", "--fail-after", "2",
		"--request-timeout", c.Spec.ProxyTimeout.String())
	if err != nil {
		return err
	}
	c.Proxy = p
	return nil
}

// Engines are the engines still running.
func (c *Cluster) Engines() []*testbed.Engine {
	var out []*testbed.Engine
	for _, e := range append(append([]*testbed.Engine(nil), c.Prefill...), c.Decode...) {
		if !e.Exited() {
			out = append(out, e)
		}
	}
	return out
}

// Procs are every process of the cluster still running, by role name.
func (c *Cluster) Procs() map[string]*testbed.Proc {
	out := map[string]*testbed.Proc{}
	add := func(name string, p *testbed.Proc) {
		if p != nil && !p.Exited() {
			out[name] = p
		}
	}
	for i, m := range c.Masters {
		add(fmt.Sprintf("master%d@%s", i+1, m.Host.Name), m.Proc)
	}
	for i, s := range c.Stores {
		add(fmt.Sprintf("store%d@%s", i+1, s.Host.Name), s.Proc)
	}
	for i, e := range c.Prefill {
		add(fmt.Sprintf("prefill%d@%s", i+1, e.Host.Name), e.Proc)
	}
	for i, e := range c.Decode {
		add(fmt.Sprintf("decode%d@%s", i+1, e.Host.Name), e.Proc)
	}
	if c.Proxy != nil {
		add("proxy@"+c.Proxy.Host.Name, c.Proxy.Proc)
	}
	return out
}

// Close stops the driver's store client (the bed's Close stops the
// processes).
func (c *Cluster) Close() {
	if c.Client != nil {
		c.Client.Abort()
	}
	if c.engine != nil {
		c.engine.Close()
	}
}
