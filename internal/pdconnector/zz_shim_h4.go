package pdconnector

// TEMPORARY shim (helper H4), to be deleted at the merge: it gives the old
// API (New binds the bootstrap port itself) the shape of the new one
// (New binds nothing; Config.BootstrapAddr; Run(ctx, ln) serves the side
// channel). With the new API, NewShimH4(cfg, addr) is
// `cfg.BootstrapAddr = addr; New(cfg)`.

import (
	"context"
	"net"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
)

// NewShimH4 builds a connector that binds nothing; bootstrapAddr is the
// advertised host:port of the listener later handed to Run ("" for a
// consumer that does not listen).
func NewShimH4(cfg Config, bootstrapAddr string) (*Connector, error) {
	role := cfg.Role
	if role == "" {
		role = RoleBoth
	}
	cfg.Role, cfg.BootstrapPort = RoleConsumer, 0 // old New: a consumer without a port binds nothing
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	c.cfg.Role = role
	c.bootAddr = bootstrapAddr
	if bootstrapAddr != "" {
		c.registry = bootstrap.NewRegistry(c.cfg.EngineID, "", 1)
	}
	return c, nil
}

// Run serves the bootstrap registry (and pulls, on a producer) on ln until
// ctx ends or the connector is closed; ln may be nil.
func (c *Connector) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	if ln == nil {
		<-ctx.Done()
		return nil
	}
	srv := &bootstrap.Server{Metrics: promhttp.HandlerFor(c.m.reg, promhttp.HandlerOpts{}), Logger: c.log, Registry: c.registry}
	if c.cfg.Role != RoleConsumer {
		srv.Handler = c
	}
	return srv.Serve(ctx, ln)
}
