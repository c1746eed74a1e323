package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/conductor"
	"github.com/kvcache-go/mooncake/internal/conductor/service"
)

func newConductorCmd() *cobra.Command {
	var (
		cfg     service.Config
		host    string
		port    int
		static  string
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "conductor",
		Short: "KV cache indexer service speaking Mooncake's Indexer API",
		Long: `Index which instance holds which prefix, on which tier (GPU device, CPU host, disk), from the KV
events of vLLM, SGLang and Mooncake store-master publishers over ZMQ, and answer routers:
POST /register, /unregister, /query, /query_by_hash; GET /global_view, /registrations, /metrics,
/health (docs/conductor.md has the shapes). Blocks are named by the XXH3-64 hashing standard with
--seed (1337, Dynamo's) over little-endian u32 tokens, recomputed from token_ids where engines hash
otherwise. --config FILE registers publishers at start: {"kvevent_instance": {"NAME": {<a /register
body>}, ...}} (Mooncake's conductor_config.json). The first line on stdout reports the address bound.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = cmdLogger(cmd, verbose)
			s := service.New(cfg)
			if static != "" {
				if err := registerStatic(s, static); err != nil {
					return &ExitError{Code: 2, Err: err}
				}
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "conductor listening on http://%s (%d publishers)\n", ln.Addr(), len(s.Index().Registrations()))
			return s.Run(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&host, "host", "127.0.0.1", "address to listen on")
	f.IntVar(&port, "port", 13333, "HTTP port (0 picks a free port)")
	f.Uint64Var(&cfg.Index.Seed, "seed", conductor.DefaultSeed, "XXH3 seed of the block hashing standard")
	f.IntVar(&cfg.Index.MaxBlocks, "max-blocks", 0, "refuse (and count) stored blocks beyond this many distinct blocks (0 = no bound)")
	f.StringVar(&static, "config", "", "JSON file of publishers to register at start (Mooncake's conductor_config.json shape)")
	f.BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	return cmd
}

// staticConfig is Mooncake's conductor_config.json: publishers by name.
type staticConfig struct {
	Instances map[string]struct {
		Endpoint       string `json:"endpoint"`
		ReplayEndpoint string `json:"replay_endpoint"`
		Type           string `json:"type"`
		Model          string `json:"modelname"`
		Lora           string `json:"lora_name"`
		Tenant         string `json:"tenant_id"`
		Instance       string `json:"instance_id"`
		BlockSize      int    `json:"block_size"`
		DPRank         int    `json:"dp_rank"`
		Salt           string `json:"additionalsalt"`
	} `json:"kvevent_instance"`
}

func registerStatic(s *service.Service, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var c staticConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for name, p := range c.Instances {
		kind, _ := conductor.ParseKind(p.Type)
		if p.Instance == "" {
			p.Instance = name
		}
		r := conductor.Registration{Kind: kind, Endpoint: p.Endpoint, ReplayEndpoint: p.ReplayEndpoint, Instance: p.Instance, DPRank: p.DPRank,
			Identity: conductor.Identity{Tenant: p.Tenant, Model: p.Model, Lora: p.Lora, Salt: p.Salt, BlockSize: p.BlockSize}}
		if r.Kind == "" {
			r.Kind = conductor.Kind(p.Type)
		}
		if _, err := s.Register(r); err != nil {
			return fmt.Errorf("%s: %s: %w", path, name, err)
		}
	}
	return nil
}
