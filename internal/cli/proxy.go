package cli

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/proxy"
)

func newProxyCmd() *cobra.Command {
	var (
		cfg     proxy.Config
		host    string
		port    int
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "OpenAI-compatible front door of a prefill/decode disaggregated cluster",
		Long: `Dispatch each completion request to one prefill and one decode instance at the same time
(the decode instance pulls the KV cache from the prefill instance) and stream decode's answer back.
--prefill URL[,bootstrap=HOST:PORT] and --decode URL are repeatable. The bootstrap registry of a
prefill instance defaults to the URL's host at port 8998. The first line on stdout reports the
address bound. Endpoints: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics.

--policy conductor (alias of --prefill-policy) picks the prefill instance with the lowest predicted
time to first token: queued predicted prefill seconds + T_prefill(uncached tokens, cached prefix)
with T_prefill = cost-fixed + cost-per-token*n + cost-per-token-pair*(n*p + n*n/2), a prompt byte
counted as a token. --ttft-slo 30s then answers 429 when even the best prediction exceeds 30s.

--indexer-url http://HOST:13333 routes prefill on a remote KV cache indexer speaking Mooncake's
Indexer API (mooncake conductor, Mooncake's or Dynamo's): each prompt's token ids are POSTed to
/query and the tiered prefix it reports per instance (GPU, host CPU, disk) is weighed: a host hit
costs a load (--cost-host-per-token, --tier-weight-host), a disk hit more.

--protocol picks what is sent upstream, so the proxy can front real vLLM or SGLang instances:
mooncake (ours: transfer_id, remote_bootstrap_addr, remote_engine_id), vllm (vLLM's example
proxy: X-Request-Id pairing, bootstrap_server_host/port), vllm-transfer-id (vLLM's reworked
connector: transfer_id, remote_bootstrap_addr as http://HOST:PORT, remote_engine_id),
vllm-seed (prefill first; its kv_transfer_params are forwarded to decode) or sglang
(bootstrap_host, bootstrap_port, bootstrap_room in the same body to both). docs/pd.md has
the exact bodies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = cmdLogger(cmd, verbose)
			p, err := proxy.New(cfg)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "proxy listening on http://%s (%d prefill, %d decode)\n",
				ln.Addr(), len(cfg.Prefill), len(cfg.Decode))
			return p.Run(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&host, "host", "127.0.0.1", "address to listen on")
	f.IntVar(&port, "port", 8000, "HTTP port (0 picks a free port)")
	f.StringArrayVar(&cfg.Prefill, "prefill", nil, "prefill instance URL[,bootstrap=HOST:PORT][,events=tcp://H:P[,replay=tcp://H:P]][,id=NAME (its instance_id at --indexer-url)] (repeatable)")
	f.StringArrayVar(&cfg.Decode, "decode", nil, "decode instance URL (repeatable)")
	f.StringVar(&cfg.Protocol, "protocol", proxy.ProtocolMooncake, "what is sent upstream: "+strings.Join(proxy.Protocols, ", "))
	f.StringVar(&cfg.PrefillPolicy, "prefill-policy", proxy.PolicyKVAware, "round-robin, least-loaded, kvcache-aware or conductor")
	f.StringVar(&cfg.PrefillPolicy, "policy", proxy.PolicyKVAware, "alias of --prefill-policy")
	def := proxy.DefaultCostModel()
	f.DurationVar(&cfg.TTFTSLO, "ttft-slo", 0, "conductor: reject with 429 when the predicted time to first token exceeds this (0 = off)")
	f.Float64Var(&cfg.Cost.Fixed, "cost-fixed", def.Fixed, "conductor cost model: assumed prefill seconds per request")
	f.Float64Var(&cfg.Cost.PerToken, "cost-per-token", def.PerToken, "conductor cost model: assumed prefill seconds per uncached prompt token (a byte)")
	f.Float64Var(&cfg.Cost.PerTokenPair, "cost-per-token-pair", def.PerTokenPair, "conductor cost model: assumed seconds per (new token, attended position) pair")
	f.Float64Var(&cfg.Cost.HostPerToken, "cost-host-per-token", def.HostPerToken, "conductor cost model: assumed seconds to load one cached token from host memory (indexer tiers)")
	f.Float64Var(&cfg.Cost.DiskPerToken, "cost-disk-per-token", def.DiskPerToken, "conductor cost model: assumed seconds to load one cached token from disk (indexer tiers)")
	tw := proxy.DefaultTierWeights()
	f.Float64Var(&cfg.Tiers.Host, "tier-weight-host", tw.Host, "kvcache-aware: worth of a host-cached block relative to a device one (indexer tiers)")
	f.Float64Var(&cfg.Tiers.Disk, "tier-weight-disk", tw.Disk, "kvcache-aware: worth of a disk-cached block relative to a device one (indexer tiers)")
	f.StringVar(&cfg.Tokenizer, "tokenizer", proxy.TokenizerByteLevel, "how prompts become token ids for KV events and the indexer: byte-level (ours), engine (POST /tokenize to a prefill instance) or the path of the model's tokenizer.json or SentencePiece tokenizer.model")
	f.StringVar(&cfg.Indexer.URL, "indexer-url", "", "route prefill on a remote KV cache indexer speaking Mooncake's Indexer API (mooncake conductor); a prefill spec's id=NAME is its instance_id there")
	f.StringVar(&cfg.Indexer.Model, "indexer-model", "", "model name of indexer queries (default: the request's model)")
	f.IntVar(&cfg.Indexer.BlockSize, "indexer-block-size", 0, "the engines' block size in tokens for indexer queries (default 16)")
	f.StringVar(&cfg.Indexer.Tenant, "indexer-tenant", "", "tenant_id of indexer queries (default: the indexer's)")
	f.DurationVar(&cfg.Indexer.Timeout, "indexer-timeout", 200*time.Millisecond, "bound on one indexer query; on failure the request is routed without it")
	f.StringVar(&cfg.DecodePolicy, "decode-policy", proxy.PolicyLeastLoaded, "round-robin, least-loaded or kvcache-aware")
	f.DurationVar(&cfg.HealthInterval, "health-interval", 2*time.Second, "period of the instance health checks")
	f.IntVar(&cfg.FailAfter, "fail-after", 2, "failed health checks before an instance leaves rotation")
	f.IntVar(&cfg.MaxInFlight, "max-inflight", 0, "reject with 429 when every instance of a role has this many requests in flight (0 = no limit)")
	f.DurationVar(&cfg.RequestTimeout, "request-timeout", 10*time.Minute, "bound on each upstream request")
	f.BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	return cmd
}
