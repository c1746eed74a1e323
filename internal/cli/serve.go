package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/server"
)

// KVConnectorOptions is what `mooncake serve` hands a KV connector factory.
type KVConnectorOptions struct {
	Role   string         // both, producer or consumer (--role)
	Config map[string]any // --kv-connector-config (JSON object)
	Host   string         // --host
	// BootstrapPort is --bootstrap-port when given (nil otherwise); it
	// overrides the config's bootstrap_port.
	BootstrapPort *int
	Logger        *slog.Logger
}

// KVConnectorSetup is what a factory returns: the connector, optionally
// the allocator of the engine's KV memory (for example transfer-engine
// registered buffers), and a Close run after the server stops.
type KVConnectorSetup struct {
	Connector engine.Connector
	Allocator kvcache.Allocator
	Close     func() error
	// AfterStart, if set, runs once the engine exists (its KVCaches are
	// registered with the connector by then) and before serving.
	AfterStart func(e *engine.Engine) error
	// Collectors are registered with the server's Prometheus registry, so
	// the engine's /metrics shows the connector's metrics.
	Collectors []prometheus.Collector
}

// KVConnectorFactory builds a connector for `mooncake serve --kv-connector NAME`.
type KVConnectorFactory func(ctx context.Context, opts KVConnectorOptions) (*KVConnectorSetup, error)

// kvConnectors is the seam for KV connectors: add one entry per connector
// (the P/D connector registers itself here).
var kvConnectors = map[string]KVConnectorFactory{}

type serveFlags struct {
	model, host, role, connector, connectorCfg, policy string
	port, blockSize, numBlocks, batchTokens, maxSeqs   int
	bootstrapPort                                      int
	maxModelLen, maxWaiting                            int
	seed                                               uint64
	noPrefixCache, verbose                             bool
}

func newServeCmd() *cobra.Command {
	var sf serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the reference CPU inference engine with an OpenAI-compatible API",
		Long: `Serve a Llama-architecture model on the CPU: POST /v1/completions, POST /v1/chat/completions,
GET /v1/models, GET /health (200 once requests are accepted), GET /metrics (Prometheus).
--model is a built-in model (tiny, small: deterministic weights generated from --seed, no
download) or a directory written by ` + "`mooncake model init`" + ` (or a Llama checkpoint in one
model.safetensors). The first line on stdout reports the address bound.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, sf) },
	}
	f := cmd.Flags()
	f.StringVar(&sf.model, "model", "tiny", "tiny, small, or a model directory")
	f.Uint64Var(&sf.seed, "seed", 1, "weight seed of a built-in model")
	f.StringVar(&sf.host, "host", "127.0.0.1", "address to listen on")
	f.IntVar(&sf.port, "port", 8000, "HTTP port (0 picks a free port)")
	f.StringVar(&sf.role, "role", engine.RoleBoth, "KV role: both, producer (prefill) or consumer (decode)")
	f.StringVar(&sf.connector, "kv-connector", "", "KV connector name: mooncake (P/D), store (KV pool in the store) or none (default: mooncake with --role producer|consumer, none with both)")
	f.StringVar(&sf.connectorCfg, "kv-connector-config", "", "KV connector configuration (JSON object)")
	f.IntVar(&sf.bootstrapPort, "bootstrap-port", bootstrap.DefaultPort, "bootstrap registry port of the mooncake connector (a producer's default; a consumer listens only when given; 0 picks a free port)")
	f.StringVar(&sf.policy, "kv-load-failure-policy", engine.PolicyRecompute, "recompute or fail")
	f.IntVar(&sf.blockSize, "block-size", 16, "tokens per KV block")
	f.IntVar(&sf.numBlocks, "num-blocks", 1024, "KV cache size in blocks")
	f.IntVar(&sf.batchTokens, "max-num-batched-tokens", 512, "token budget of one step (prefill chunk size)")
	f.IntVar(&sf.maxSeqs, "max-num-seqs", 64, "maximum running requests")
	f.IntVar(&sf.maxModelLen, "max-model-len", 0, "context length (0 = the model's)")
	f.IntVar(&sf.maxWaiting, "max-waiting", 256, "waiting requests beyond this get 429")
	f.BoolVar(&sf.noPrefixCache, "no-prefix-caching", false, "disable local prefix caching")
	f.BoolVarP(&sf.verbose, "verbose", "v", false, "debug logging")
	return cmd
}

func runServe(cmd *cobra.Command, sf serveFlags) error {
	ctx := cmd.Context()
	level := slog.LevelInfo
	if sf.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	m, tk, err := loadModel(sf.model, sf.seed)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	cfg := engine.Config{Model: m, BlockSize: sf.blockSize, NumBlocks: sf.numBlocks, MaxNumBatchedTokens: sf.batchTokens,
		MaxNumSeqs: sf.maxSeqs, MaxModelLen: sf.maxModelLen, MaxWaiting: sf.maxWaiting, DisablePrefixCaching: sf.noPrefixCache,
		KVLoadFailurePolicy: sf.policy, Role: sf.role, Logger: log}
	if err := cfg.Validate(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	var setup *KVConnectorSetup
	connector := sf.connector
	if connector == "" && sf.role != engine.RoleBoth {
		connector = "mooncake" // --role producer|consumer alone is a P/D instance
	}
	if cmd.Flags().Changed("bootstrap-port") && (connector == "" || connector == "none") {
		return &ExitError{Code: 2, Err: fmt.Errorf("--bootstrap-port needs a KV connector (--role producer|consumer or --kv-connector mooncake)")}
	}
	if connector != "" && connector != "none" {
		factory, ok := kvConnectors[connector]
		if !ok {
			return &ExitError{Code: 2, Err: fmt.Errorf("unknown --kv-connector %q (known: %s, none)", connector, connectorNames())}
		}
		opts := KVConnectorOptions{Role: sf.role, Host: sf.host, Logger: log}
		if cmd.Flags().Changed("bootstrap-port") {
			opts.BootstrapPort = &sf.bootstrapPort
		}
		if sf.connectorCfg != "" {
			if err := json.Unmarshal([]byte(sf.connectorCfg), &opts.Config); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--kv-connector-config: %w", err)}
			}
		}
		if setup, err = factory(ctx, opts); err != nil {
			return err
		}
		if setup.Close != nil {
			defer setup.Close()
		}
		cfg.Connector, cfg.Allocator = setup.Connector, setup.Allocator
	}
	eng, err := engine.New(cfg)
	if err != nil {
		return err
	}
	if setup != nil && setup.AfterStart != nil {
		if err := setup.AfterStart(eng); err != nil {
			return err
		}
	}
	srv, err := server.New(server.Config{Engine: eng, Tokenizer: tk, Logger: log})
	if err != nil {
		return err
	}
	if setup != nil && len(setup.Collectors) > 0 {
		if err := registerAll(srv.Registry(), setup.Collectors); err != nil {
			return fmt.Errorf("KV connector metrics: %w", err)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(sf.host, strconv.Itoa(sf.port)))
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "serving %s on http://%s (role %s, KV %d bytes/token)\n",
		m.Name, ln.Addr(), cfg.Role, eng.KVCaches().Layout.BytesPerToken())
	return srv.Serve(ctx, ln)
}

func registerAll(reg *prometheus.Registry, cs []prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// connectorNames lists the registered KV connectors, sorted, for messages.
func connectorNames() string {
	names := make([]string, 0, len(kvConnectors))
	for n := range kvConnectors {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
