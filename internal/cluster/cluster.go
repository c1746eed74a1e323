package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/pdconnector"
	"github.com/kvcache-go/mooncake/internal/proxy"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
)

// Config configures a whole local cluster: a proxy in front of prefill and
// decode instances, all in this process.
type Config struct {
	Model     *model.Model
	Tokenizer tokenizer.ByteLevel
	Host      string
	ProxyPort int
	Prefill   int // instances (default 1)
	Decode    int // instances (default 1)
	// PrefillTP and DecodeTP are the tensor-parallel sizes of the prefill
	// and decode engines (0: Instance.TP); the P/D connector maps one onto
	// the other.
	PrefillTP, DecodeTP int
	// Instance is the template of every instance (Model, Role, Host and
	// ports are filled in).
	Instance InstanceConfig
	// PrefillEvents: prefill instances publish KV events (on free loopback
	// ports, with replay) and the proxy's policies index them.
	PrefillEvents bool
	// Proxy is the proxy's config (Prefill/Decode are filled in).
	Proxy  proxy.Config
	Logger *slog.Logger
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.Model == nil {
		return errors.New("cluster: Config.Model is required")
	}
	if c.Prefill < 0 || c.Decode < 0 || c.ProxyPort < 0 || c.PrefillTP < 0 || c.DecodeTP < 0 {
		return errors.New("cluster: negative instance count, port or TP size")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Prefill <= 0 {
		c.Prefill = 1
	}
	if c.Decode <= 0 {
		c.Decode = 1
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Proxy.Logger == nil {
		c.Proxy.Logger = c.Logger.With("component", "proxy")
	}
	if c.Proxy.HealthInterval == 0 {
		c.Proxy.HealthInterval = 500 * time.Millisecond
	}
	return c
}

// Cluster is a running local cluster.
type Cluster struct {
	Prefill []*Instance
	Decode  []*Instance
	Proxy   *proxy.Proxy
	URL     string // the proxy's base URL

	stop context.CancelFunc
	done chan error
}

// Up starts every instance and the proxy, and returns once the proxy sees
// every instance healthy (or ctx ends). The cluster runs until Close.
func Up(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c = &Cluster{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := c.startInstances(ctx, &cfg); err != nil {
		return c, err
	}
	p, err := proxy.New(cfg.Proxy)
	if err != nil {
		return c, err
	}
	c.Proxy = p
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.ProxyPort)))
	if err != nil {
		return c, err
	}
	c.URL = "http://" + ln.Addr().String()
	if err := waitReady(ctx, p); err != nil {
		ln.Close()
		return c, err
	}
	pctx, stop := context.WithCancel(context.Background())
	c.stop, c.done = stop, make(chan error, 1)
	go func() { c.done <- p.Run(pctx, ln) }()
	return c, nil
}

// startInstances starts cfg.Prefill producers and cfg.Decode consumers and
// lists them in cfg.Proxy.
func (c *Cluster) startInstances(ctx context.Context, cfg *Config) error {
	for i := 0; i < cfg.Prefill+cfg.Decode; i++ {
		ic := cfg.Instance
		ic.Model, ic.Tokenizer, ic.Host, ic.Port = cfg.Model, cfg.Tokenizer, cfg.Host, 0
		ic.Role = pdconnector.RoleProducer
		if cfg.PrefillTP > 0 {
			ic.TP = cfg.PrefillTP
		}
		if cfg.PrefillEvents {
			host := cfg.Host
			if host == "0.0.0.0" || host == "::" {
				host = "127.0.0.1"
			}
			ic.KVEventsEndpoint, ic.KVEventsReplay = "tcp://"+host+":0", "tcp://"+host+":0"
		}
		if i >= cfg.Prefill {
			ic.Role = pdconnector.RoleConsumer
			ic.KVEventsEndpoint, ic.KVEventsReplay = "", ""
			ic.TP = cfg.Instance.TP
			if cfg.DecodeTP > 0 {
				ic.TP = cfg.DecodeTP
			}
		}
		ic.Logger = cfg.Logger.With("instance", fmt.Sprintf("%s-%d", ic.Role, i))
		inst, err := StartInstance(ctx, ic)
		if err != nil {
			return err
		}
		if ic.Role == pdconnector.RoleProducer {
			c.Prefill = append(c.Prefill, inst)
			cfg.Proxy.Prefill = append(cfg.Proxy.Prefill, inst.ProxySpec())
		} else {
			c.Decode = append(c.Decode, inst)
			cfg.Proxy.Decode = append(cfg.Proxy.Decode, inst.ProxySpec())
		}
	}
	return nil
}

// waitReady health-checks every instance until all are healthy or ctx ends.
func waitReady(ctx context.Context, p *proxy.Proxy) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		p.CheckNow(ctx)
		if p.Ready() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: instances not ready: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops the proxy and every instance, and waits for them.
func (c *Cluster) Close() error {
	if c.stop != nil {
		c.stop()
		<-c.done
		c.stop = nil
	}
	for _, in := range append(append([]*Instance{}, c.Prefill...), c.Decode...) {
		in.Close()
	}
	return nil
}
