package cli

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/election"
	"github.com/kvcache-go/mooncake/internal/leader"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// haFlags are the high-availability options of `mooncake master`.
type haFlags struct {
	enabled   bool
	etcd      string
	cluster   string
	advertise string
	lease     time.Duration
}

func (h *haFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&h.enabled, "ha", false, "high availability: elect the leader among masters in etcd (needs --etcd)")
	f.StringVar(&h.etcd, "etcd", "", "etcd endpoints HOST:PORT[;HOST:PORT] for --ha")
	f.StringVar(&h.cluster, "cluster", leader.DefaultCluster, "cluster id for --ha (election key mooncake-store/<cluster>/master_view)")
	f.StringVar(&h.advertise, "advertise", "", "host clients dial to reach this master when it leads (default: --host, 127.0.0.1 for 0.0.0.0)")
	f.DurationVar(&h.lease, "ha-lease", 5*time.Second, "election lease: a dead leader is replaced after this (whole seconds)")
}

// runHAMaster campaigns in etcd and serves the master while leading.
func runHAMaster(cmd *cobra.Command, cfg masterserver.ServerConfig, h haFlags) error {
	if h.etcd == "" {
		return &ExitError{Code: 2, Err: fmt.Errorf("--ha needs --etcd HOST:PORT[;HOST:PORT]")}
	}
	t, err := leader.ParseTarget(leader.Scheme + strings.TrimPrefix(h.etcd, leader.Scheme))
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	hc := election.Config{Endpoints: t.Endpoints, Cluster: h.cluster, LeaseTTL: h.lease, Master: cfg, Advertise: h.advertise, Logger: cfg.Logger}
	s, err := election.New(hc)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	var hl net.Listener
	httpAddr := ""
	if cfg.HTTPAddr != "" {
		if hl, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("master: listen %s: %w", cfg.HTTPAddr, err)
		}
		httpAddr = hl.Addr().String()
	}
	fmt.Fprintf(cmd.OutOrStdout(), "master candidate cluster=%s etcd=%s http=%s\n", h.cluster, strings.Join(t.Endpoints, ";"), httpAddr)
	return s.Run(cmd.Context(), hl)
}
