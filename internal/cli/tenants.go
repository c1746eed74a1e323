package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvcache-go/mooncake/internal/leader"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"github.com/kvcache-go/mooncake/internal/tlsconf"
)

// tokenEnv is the environment variable of a client's tenant token,
// tenantIDEnv Mooncake's of the tenant it names.
const (
	tokenEnv    = "MOONCAKE_TENANT_TOKEN"
	tenantIDEnv = "MOONCAKE_TENANT_ID"
)

// masterSecurityFlags are the master's tenants and TLS flags.
type masterSecurityFlags struct {
	tenants string
	reload  time.Duration
	tls     tlsconf.Files
	// absentEmpty: an etcd key that does not exist is a policy without
	// tenants (Mooncake's etcd connector), not an error.
	absentEmpty bool
}

func (f *masterSecurityFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.tenants, "tenants", "", "tenant policy (YAML or JSON; docs/security.md): a file, or an etcd key etcd://HOST:PORT[;HOST:PORT]/KEY; every call then needs a tenant token or the cluster secret, keys are scoped to the caller's tenant and quotas apply; re-read when it changes (--tenants-reload) and on SIGHUP")
	fs.DurationVar(&f.reload, "tenants-reload", time.Second, "how often the tenant policy file is checked for changes")
	fs.StringVar(&f.tls.Cert, "tls-cert", "", "PEM certificate of the master: gRPC and fastrpc over TLS (default: plaintext)")
	fs.StringVar(&f.tls.Key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.tls.CA, "tls-client-ca", "", "PEM CA of client certificates (mutual TLS; a certificate named in a tenant's cert_names is its credential)")
	fs.BoolVar(&f.tls.RequireClientCert, "tls-require-client-cert", false, "refuse clients without a certificate signed by --tls-client-ca")
}

// apply sets the configuration's tenants and TLS and starts the policy's
// reloading (its file polled, SIGHUP); stop ends it.
func (f *masterSecurityFlags) apply(ctx context.Context, cfg *masterserver.ServerConfig, log *slog.Logger) (stop func(), err error) {
	if cfg.TLS, err = tlsconf.Server(f.tls); err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	if f.tenants == "" {
		return func() {}, nil
	}
	load, save, closeLoad, err := policyLoader(f.tenants, f.absentEmpty)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: fmt.Errorf("--tenants: %w", err)}
	}
	src, err := tenant.NewSource(ctx, tenant.SourceConfig{Load: load, Save: save, Interval: f.reload,
		OnError: func(err error) { log.Error("master: tenant policy not reloaded (the one in force stays)", "err", err) },
		OnChange: func(s *tenant.Set, gen int64) {
			log.Info("master: tenant policy in force", "tenants", len(s.Tenants()), "generation", gen)
		}})
	if err != nil {
		closeLoad()
		return nil, &ExitError{Code: 2, Err: fmt.Errorf("--tenants: %w", err)}
	}
	cfg.Tenants = src
	ctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var wg sync.WaitGroup
	wg.Go(func() { _ = src.Run(ctx) })
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if _, err := src.Reload(ctx); err != nil {
					log.Error("master: tenant policy not reloaded on SIGHUP (the one in force stays)", "err", err)
				}
			}
		}
	})
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
		closeLoad()
	}, nil
}

// policyLoader reads the tenant policy from a file, or from an etcd key
// given as etcd://HOST:PORT[;HOST:PORT]/KEY (the client of the master's
// HA election, internal/leader), and writes it back there (the admin
// API's quota changes); absentEmpty reads a key that does not exist as a
// policy without tenants.
func policyLoader(where string, absentEmpty bool) (tenant.Loader, tenant.Saver, func(), error) {
	rest, ok := strings.CutPrefix(where, "etcd://")
	if !ok {
		return tenant.FileLoader(where), tenant.FileSaver(where), func() {}, nil
	}
	hosts, key, ok := strings.Cut(rest, "/")
	if !ok || hosts == "" || key == "" {
		return nil, nil, nil, fmt.Errorf("want etcd://HOST:PORT[;HOST:PORT]/KEY, got %q", where)
	}
	cli, err := leader.NewEtcdClient(strings.FieldsFunc(hosts, func(r rune) bool { return r == ';' || r == ',' }))
	if err != nil {
		return nil, nil, nil, err
	}
	load := func(ctx context.Context) ([]byte, error) {
		r, err := cli.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("etcd get %s: %w", key, err)
		}
		if len(r.Kvs) == 0 {
			if absentEmpty {
				return []byte("version: 1\ntenants: []\n"), nil
			}
			return nil, fmt.Errorf("etcd key %s: not found", key)
		}
		return r.Kvs[0].Value, nil
	}
	save := func(ctx context.Context, policy []byte) error {
		if _, err := cli.Put(ctx, key, string(policy)); err != nil {
			return fmt.Errorf("etcd put %s: %w", key, err)
		}
		return nil
	}
	return load, save, func() { _ = cli.Close() }, nil
}

// clientSecurityFlags are a store client's credential, tenant and TLS
// flags.
type clientSecurityFlags struct {
	token    string
	tenantID string
	tls      tlsconf.Files
}

func (f *clientSecurityFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.token, "token", "", "tenant token for a master with tenants (default $"+tokenEnv+")")
	fs.StringVar(&f.tenantID, "tenant-id", "", "the tenant to act in (Mooncake's tenant_id; default $"+tenantIDEnv+"): without --token, a tenant the master's policy leaves open to naming (docs/security.md)")
	fs.StringVar(&f.tls.CA, "tls-ca", "", "PEM CA of the master's certificate: reach the master over TLS")
	fs.StringVar(&f.tls.Cert, "tls-cert", "", "PEM client certificate (mutual TLS)")
	fs.StringVar(&f.tls.Key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.tls.ServerName, "tls-server-name", "", "name the master's certificate is checked against (default: the host of --master)")
}

// clientSecurity is what a client sends: its token, the tenant it names
// and its TLS configuration (nil: plaintext).
type clientSecurity struct {
	token, tenantID string
	tls             *tls.Config
}

// resolve fills the token (the flag, else $MOONCAKE_TENANT_TOKEN) and the
// tenant (the flag, else $MOONCAKE_TENANT_ID) and loads the TLS files.
func (f *clientSecurityFlags) resolve() (clientSecurity, error) {
	c, err := tlsconf.Client(f.tls)
	if err != nil {
		return clientSecurity{}, &ExitError{Code: 2, Err: err}
	}
	return clientSecurity{token: cmp.Or(f.token, os.Getenv(tokenEnv)), tenantID: cmp.Or(f.tenantID, os.Getenv(tenantIDEnv)), tls: c}, nil
}
