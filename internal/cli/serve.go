package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/engine"
)

type serveFlags struct {
	model, host, role, connector, connectorCfg, policy string
	kvEvents, kvEventsReplay, kvEventsTopic            string
	port, blockSize, numBlocks, batchTokens, maxSeqs   int
	bootstrapPort                                      int
	maxModelLen, maxWaiting, tp                        int
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
--model is a built-in model (tiny, tiny-tp, wide-kv, small: deterministic weights generated from --seed, no
download) or a directory written by ` + "`mooncake model init`" + ` (or a Llama checkpoint in one
model.safetensors). The first line on stdout reports the address bound.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, sf) },
	}
	f := cmd.Flags()
	f.StringVar(&sf.model, "model", "tiny", "tiny, tiny-tp, wide-kv, small, or a model directory")
	f.Uint64Var(&sf.seed, "seed", 1, "weight seed of a built-in model")
	f.StringVar(&sf.host, "host", "127.0.0.1", "address to listen on")
	f.IntVar(&sf.port, "port", 8000, "HTTP port (0 picks a free port)")
	f.StringVar(&sf.role, "role", engine.RoleBoth, "KV role: both, producer (prefill) or consumer (decode)")
	f.StringVar(&sf.connector, "kv-connector", "", "KV connector name: mooncake (P/D), store (KV pool in the store) or none (default: mooncake with --role producer|consumer, none with both)")
	f.StringVar(&sf.connectorCfg, "kv-connector-config", "", "KV connector configuration (JSON object)")
	f.IntVar(&sf.bootstrapPort, "bootstrap-port", bootstrap.DefaultPort, "bootstrap registry port of the mooncake connector (a producer's default; a consumer listens only when given; 0 picks a free port)")
	f.StringVar(&sf.policy, "kv-load-failure-policy", engine.PolicyRecompute, "recompute or fail")
	f.IntVar(&sf.tp, "tp", 1, "tensor-parallel ranks the model splits across (must divide the KV heads; outputs are bit-identical for every value)")
	f.IntVar(&sf.blockSize, "block-size", 16, "tokens per KV block")
	f.IntVar(&sf.numBlocks, "num-blocks", 1024, "KV cache size in blocks")
	f.IntVar(&sf.batchTokens, "max-num-batched-tokens", 512, "token budget of one step (prefill chunk size)")
	f.IntVar(&sf.maxSeqs, "max-num-seqs", 64, "maximum running requests")
	f.IntVar(&sf.maxModelLen, "max-model-len", 0, "context length (0 = the model's)")
	f.IntVar(&sf.maxWaiting, "max-waiting", 256, "waiting requests beyond this get 429")
	f.BoolVar(&sf.noPrefixCache, "no-prefix-caching", false, "disable local prefix caching")
	f.StringVar(&sf.kvEvents, "kv-events-endpoint", "", "publish vLLM-format KV events on this ZMQ PUB address (tcp://HOST:PORT; vLLM uses tcp://*:5557)")
	f.StringVar(&sf.kvEventsReplay, "kv-events-replay-endpoint", "", "KV event replay (ZMQ ROUTER) address, tcp://HOST:PORT")
	f.StringVar(&sf.kvEventsTopic, "kv-events-topic", "", "topic frame of every KV event message")
	f.BoolVarP(&sf.verbose, "verbose", "v", false, "debug logging")
	return cmd
}

func runServe(cmd *cobra.Command, sf serveFlags) error {
	ctx := cmd.Context()
	log := cmdLogger(cmd, sf.verbose)
	m, tk, err := loadModel(sf.model, sf.seed)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	ic := cluster.InstanceConfig{Model: m, Tokenizer: tk, Host: sf.host, Port: sf.port, Role: sf.role, TP: sf.tp,
		BlockSize: sf.blockSize, NumBlocks: sf.numBlocks, MaxNumBatchedTokens: sf.batchTokens, MaxNumSeqs: sf.maxSeqs,
		MaxModelLen: sf.maxModelLen, MaxWaiting: sf.maxWaiting, DisablePrefixCaching: sf.noPrefixCache,
		FailurePolicy: sf.policy, Logger: log,
		KVEventsEndpoint: strings.Replace(sf.kvEvents, "tcp://*:", "tcp://0.0.0.0:", 1),
		KVEventsReplay:   strings.Replace(sf.kvEventsReplay, "tcp://*:", "tcp://0.0.0.0:", 1), KVEventsTopic: sf.kvEventsTopic}
	if err := ic.Validate(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	var bootstrapPort *int
	if cmd.Flags().Changed("bootstrap-port") {
		bootstrapPort = &sf.bootstrapPort
	}
	if err := setKVConnector(&ic, sf.connector, sf.connectorCfg, bootstrapPort); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	inst, err := cluster.StartInstance(ctx, ic)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "serving %s on %s (role %s, tp %d, KV %d bytes/token)\n",
		m.Name, inst.URL, inst.Engine.Config().Role, inst.Engine.Config().TP, inst.Engine.KVCaches().Layout.BytesPerToken())
	select {
	case <-ctx.Done():
	case <-inst.Done():
	}
	return inst.Close()
}

// kvConnectorNames are the values of --kv-connector besides none.
const kvConnectorNames = "mooncake, store"

// setKVConnector sets ic's KV connector from --kv-connector NAME and
// --kv-connector-config: the one list of connectors `mooncake serve` knows.
// Without a name, --role producer|consumer alone is a P/D instance
// (mooncake) and --role both has none.
func setKVConnector(ic *cluster.InstanceConfig, name, rawCfg string, bootstrapPort *int) error {
	if name == "" && ic.Role != engine.RoleBoth {
		name = "mooncake"
	}
	var cfg map[string]any
	if rawCfg != "" {
		if err := json.Unmarshal([]byte(rawCfg), &cfg); err != nil {
			return fmt.Errorf("--kv-connector-config: %w", err)
		}
	}
	switch name {
	case "", "none":
		if bootstrapPort != nil {
			return fmt.Errorf("--bootstrap-port needs a KV connector (--role producer|consumer or --kv-connector mooncake)")
		}
		ic.KVConnector = noKVConnector
		return nil
	case "mooncake":
		return setMooncakeConnector(ic, cfg, bootstrapPort)
	case "store":
		if bootstrapPort != nil {
			return fmt.Errorf("--bootstrap-port is for the mooncake P/D connector, not the store connector")
		}
		cc, err := parseStoreConnectorConfig(cfg)
		if err != nil {
			return err
		}
		ic.KVConnector = storeConnector(cc)
		return nil
	default:
		return fmt.Errorf("unknown --kv-connector %q (known: %s, none)", name, kvConnectorNames)
	}
}

// noKVConnector runs the engine without a KV connector, whatever its role.
func noKVConnector(context.Context, string, *slog.Logger) (*cluster.KVConnector, error) {
	return nil, nil
}
