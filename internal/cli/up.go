package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/proxy"
)

type upFlags struct {
	host, model, policy      string
	port, prefill, decode    int
	prefillTP, decodeTP      int
	blockSize, numBlocks     int
	seed                     uint64
	abortTimeout, pullTimout time.Duration
	verbose, kvEvents        bool
}

func newUpCmd() *cobra.Command {
	var uf upFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a whole P/D disaggregated cluster in one process: proxy, prefill and decode engines",
		Long: `Start --prefill prefill engines and --decode decode engines (each with its Mooncake P/D
connector, transfer engine and bootstrap registry) and an OpenAI-compatible proxy on --port, all on
this machine, all in this process. /health on the proxy answers 200 once every instance is ready.
--model is a built-in model (tiny, tiny-tp, wide-kv, small: weights generated from --seed on start, no download) or
a model directory. Stop with Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUp(cmd, uf) },
	}
	f := cmd.Flags()
	f.StringVar(&uf.host, "host", "127.0.0.1", "address every component listens on")
	f.IntVar(&uf.port, "port", 8000, "proxy HTTP port (0 picks a free port)")
	f.StringVar(&uf.model, "model", "tiny", "tiny, tiny-tp, wide-kv, small, or a model directory (the same default as serve and model init)")
	f.Uint64Var(&uf.seed, "seed", 1, "weight seed of a built-in model")
	f.IntVar(&uf.prefill, "prefill", 1, "prefill engines")
	f.IntVar(&uf.decode, "decode", 1, "decode engines")
	f.IntVar(&uf.prefillTP, "prefill-tp", 1, "tensor-parallel ranks of each prefill engine (must divide the KV heads)")
	f.IntVar(&uf.decodeTP, "decode-tp", 1, "tensor-parallel ranks of each decode engine (must divide the KV heads; may differ from --prefill-tp)")
	f.IntVar(&uf.blockSize, "block-size", 16, "tokens per KV block")
	f.IntVar(&uf.numBlocks, "num-blocks", 1024, "KV cache size of each engine, in blocks")
	f.StringVar(&uf.policy, "kv-load-failure-policy", engine.PolicyRecompute, "decode on a failed KV pull: recompute or fail")
	f.DurationVar(&uf.abortTimeout, "abort-timeout", 480*time.Second, "prefill frees KV nobody pulled after this")
	f.DurationVar(&uf.pullTimout, "pull-timeout", 30*time.Second, "decode gives up a KV pull after this")
	f.BoolVar(&uf.kvEvents, "kv-events", false, "prefill engines publish vLLM-format KV events (ZMQ, free ports) and the proxy routes by them")
	f.BoolVarP(&uf.verbose, "verbose", "v", false, "debug logging")
	return cmd
}

func runUp(cmd *cobra.Command, uf upFlags) error {
	ctx := cmd.Context()
	log := cmdLogger(cmd, uf.verbose)
	if uf.prefill < 1 || uf.decode < 1 {
		return &ExitError{Code: 2, Err: fmt.Errorf("--prefill and --decode must be at least 1")}
	}
	m, tk, err := loadModel(uf.model, uf.seed)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	for _, tp := range []int{uf.prefillTP, uf.decodeTP} {
		if err := m.Config.CheckTP(tp); err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("--prefill-tp/--decode-tp: %w", err)}
		}
	}
	start := time.Now()
	c, err := cluster.Up(ctx, cluster.Config{Model: m, Tokenizer: tk, Host: uf.host, ProxyPort: uf.port,
		Prefill: uf.prefill, Decode: uf.decode, PrefillTP: uf.prefillTP, DecodeTP: uf.decodeTP, Logger: log,
		Instance: cluster.InstanceConfig{BlockSize: uf.blockSize, NumBlocks: uf.numBlocks, FailurePolicy: uf.policy,
			AbortTimeout: uf.abortTimeout, PullTimeout: uf.pullTimout},
		PrefillEvents: uf.kvEvents,
		Proxy:         proxy.Config{}})
	if err != nil {
		return err
	}
	defer c.Close()
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "mooncake up: proxy on %s (model %s, %d prefill tp %d, %d decode tp %d, ready in %v)\n",
		c.URL, m.Name, len(c.Prefill), uf.prefillTP, len(c.Decode), uf.decodeTP, time.Since(start).Round(time.Millisecond))
	for i, in := range c.Prefill {
		fmt.Fprintf(out, "  prefill-%d %s  bootstrap %s\n", i, in.URL, in.BootstrapAddr())
	}
	for i, in := range c.Decode {
		fmt.Fprintf(out, "  decode-%d  %s\n", i, in.URL)
	}
	fmt.Fprintf(out, "Send requests to %s, for example:\n  curl -N %s/v1/completions -H 'Content-Type: application/json' \\\n    -d '{\"model\":%q,\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"stream\":true}'\n",
		c.URL, c.URL, m.Name)
	fmt.Fprintf(out, "Health: %s/health   Metrics: %s/metrics   Stop: Ctrl-C\n", c.URL, c.URL)
	<-ctx.Done()
	fmt.Fprintln(out, "mooncake up: shutting down")
	return nil
}
