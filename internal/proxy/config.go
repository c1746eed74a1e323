package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
)

// DefaultBootstrapPort is the port of a prefill instance's bootstrap registry
// when its spec does not name one.
const DefaultBootstrapPort = 8998

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("proxy: invalid config")

// Config configures a Proxy. Zero fields take the defaults listed.
type Config struct {
	// Prefill and Decode are instance specs. A decode spec is the engine's
	// base URL ("http://127.0.0.1:8200"). A prefill spec is the base URL,
	// optionally followed by ",bootstrap=HOST:PORT"; without it the bootstrap
	// registry is assumed on the URL's host at DefaultBootstrapPort.
	Prefill []string
	Decode  []string
	// PrefillPolicy and DecodePolicy name a Policy (round-robin, least-loaded,
	// kvcache-aware; conductor for prefill only). Defaults: kvcache-aware for
	// prefill, least-loaded for decode.
	PrefillPolicy string
	DecodePolicy  string
	// Cost is the prefill cost model of the conductor policy (zero value:
	// DefaultCostModel).
	Cost CostModel
	// TTFTSLO, if > 0 (conductor policy only), rejects a request early with
	// 429 when its predicted time to first token on the best prefill
	// instance exceeds it (Mooncake's early rejection on predicted load).
	TTFTSLO time.Duration
	// HealthInterval is the period of the active health checks (default 2s);
	// HealthTimeout bounds each check (default 1s).
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	// FailAfter is the number of consecutive failed checks that take an
	// instance out of rotation (default 2). A failed upstream connection takes
	// it out at once. One successful check puts it back: nothing is
	// blacklisted for ever.
	FailAfter int
	// MaxInFlight, if > 0, rejects a request early with 429 when every
	// healthy instance of a role already has MaxInFlight requests in flight
	// (the conductor's early rejection, by load rather than a TTFT model).
	MaxInFlight int
	// RequestTimeout bounds each upstream request, streaming included
	// (default 10m).
	RequestTimeout time.Duration
	// MaxBodyBytes bounds a client request body (default 16 MiB).
	MaxBodyBytes int64
	// BlockBytes is the text block size used to hash prompt prefixes for the
	// kvcache-aware policy (default 64 bytes, about 16 tokens).
	BlockBytes int
	// Protocol is what the proxy sends upstream (Protocols; default
	// ProtocolMooncake): ours, a vLLM variant or SGLang's, so that it can
	// front real vLLM or SGLang instances.
	Protocol string
	// EventBlockSize is the engines' block size in tokens (16): with KV
	// events (a prefill spec's events=), prompts are tokenized with the
	// byte-level tokenizer and cut into blocks of this size, named by our
	// block identity (kvevents.Index).
	EventBlockSize int
	// Indexer, if its URL is set, is a remote KV cache indexer speaking
	// Mooncake's Indexer API: the prefill policy routes on the tiered
	// prefix it reports per instance (a prefill spec's id= names the
	// instance there; default its URL) instead of the embedded index.
	Indexer IndexerConfig
	// Tokenizer is how prompts become the token ids KV blocks are named by
	// (with KV events or an indexer): TokenizerByteLevel (ours, default),
	// TokenizerEngine (POST /tokenize to a healthy prefill instance, as
	// vLLM and our engine answer), or the path of the model's
	// tokenizer.json or SentencePiece tokenizer.model (tokenizer.LoadFile;
	// completion prompts encoded here; chat requests, which
	// need the model's chat template, still ask the engine).
	Tokenizer string
	// Tiers weighs host and disk blocks for the kvcache-aware policy
	// (zero: DefaultTierWeights).
	Tiers TierWeights
	// Client sends upstream requests (default: a dedicated http.Client).
	Client *http.Client
	// Logger receives operational logs (default: discard).
	Logger *slog.Logger
	// Clock times requests for the metrics (default: the real clock).
	Clock clock.Clock
}

func (c Config) withDefaults() Config {
	if c.Protocol == "" {
		c.Protocol = ProtocolMooncake
	}
	if c.PrefillPolicy == "" {
		c.PrefillPolicy = PolicyKVAware
	}
	if c.DecodePolicy == "" {
		c.DecodePolicy = PolicyLeastLoaded
	}
	if c.HealthInterval <= 0 {
		c.HealthInterval = 2 * time.Second
	}
	if c.HealthTimeout <= 0 {
		c.HealthTimeout = time.Second
	}
	if c.FailAfter <= 0 {
		c.FailAfter = 2
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Minute
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 16 << 20
	}
	if c.BlockBytes <= 0 {
		c.BlockBytes = 64
	}
	if c.EventBlockSize <= 0 {
		c.EventBlockSize = 16
	}
	if c.Indexer.BlockSize <= 0 {
		c.Indexer.BlockSize = c.EventBlockSize
	}
	if c.Indexer.Timeout <= 0 {
		c.Indexer.Timeout = 200 * time.Millisecond
	}
	c.Indexer.URL = strings.TrimRight(c.Indexer.URL, "/")
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if len(c.Prefill) == 0 {
		return fmt.Errorf("%w: at least one --prefill instance is required", ErrConfig)
	}
	if len(c.Decode) == 0 {
		return fmt.Errorf("%w: at least one --decode instance is required", ErrConfig)
	}
	seen := map[string]bool{}
	for _, s := range c.Prefill {
		sp, err := ParsePrefillSpec(s)
		if err != nil {
			return err
		}
		if seen["p"+sp.URL] {
			return fmt.Errorf("%w: prefill instance %s listed twice", ErrConfig, sp.URL)
		}
		seen["p"+sp.URL] = true
	}
	for _, s := range c.Decode {
		u, err := parseBaseURL(s)
		if err != nil {
			return err
		}
		if seen["d"+u] {
			return fmt.Errorf("%w: decode instance %s listed twice", ErrConfig, u)
		}
		seen["d"+u] = true
	}
	for _, p := range []string{c.PrefillPolicy, c.DecodePolicy} {
		if _, err := NewPolicy(p); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if c.DecodePolicy == PolicyConductor {
		return fmt.Errorf("%w: the conductor policy applies to prefill only", ErrConfig)
	}
	if c.Protocol != "" && !validProtocol(c.Protocol) {
		return fmt.Errorf("%w: unknown protocol %q (want one of %v)", ErrConfig, c.Protocol, Protocols)
	}
	if c.TTFTSLO < 0 {
		return fmt.Errorf("%w: negative TTFT SLO", ErrConfig)
	}
	if c.TTFTSLO > 0 && c.PrefillPolicy != PolicyConductor {
		return fmt.Errorf("%w: a TTFT SLO needs the conductor prefill policy (got %q)", ErrConfig, c.PrefillPolicy)
	}
	if c.Indexer.URL != "" {
		if _, err := parseBaseURL(c.Indexer.URL); err != nil {
			return fmt.Errorf("%w: indexer URL %q is not http(s)://host:port", ErrConfig, c.Indexer.URL)
		}
	}
	if c.Tiers.Host < 0 || c.Tiers.Disk < 0 || c.Tiers.Host > 1 || c.Tiers.Disk > 1 {
		return fmt.Errorf("%w: tier weights must be in [0, 1]", ErrConfig)
	}
	if !c.Cost.valid() {
		return fmt.Errorf("%w: cost model coefficients must be finite and >= 0", ErrConfig)
	}
	if c.HealthInterval < 0 || c.HealthTimeout < 0 || c.RequestTimeout < 0 || c.FailAfter < 0 || c.MaxBodyBytes < 0 || c.MaxInFlight < 0 {
		return fmt.Errorf("%w: negative duration or count", ErrConfig)
	}
	return nil
}

// PrefillSpec is a parsed prefill instance spec.
type PrefillSpec struct {
	URL       string // base URL without trailing slash
	Bootstrap string // host:port of its bootstrap registry
	Events    string // its KV event PUB endpoint (tcp://HOST:PORT), "" none
	Replay    string // its KV event replay endpoint, "" none
	ID        string // its instance_id at a remote indexer ("" the URL)
}

// ParsePrefillSpec parses "URL[,bootstrap=HOST:PORT][,events=tcp://HOST:PORT[,replay=tcp://HOST:PORT]][,id=NAME]".
func ParsePrefillSpec(s string) (PrefillSpec, error) {
	parts := strings.Split(s, ",")
	base, err := parseBaseURL(parts[0])
	if err != nil {
		return PrefillSpec{}, err
	}
	u, _ := url.Parse(base)
	sp := PrefillSpec{URL: base, Bootstrap: net.JoinHostPort(u.Hostname(), strconv.Itoa(DefaultBootstrapPort))}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == "id" && v != "" {
			sp.ID = v
			continue
		}
		if ok && (k == "events" || k == "replay") {
			if !strings.HasPrefix(v, "tcp://") {
				return PrefillSpec{}, fmt.Errorf("%w: prefill spec %q: %s %q is not tcp://HOST:PORT", ErrConfig, s, k, v)
			}
			if k == "events" {
				sp.Events = v
			} else {
				sp.Replay = v
			}
			continue
		}
		if !ok || k != "bootstrap" {
			return PrefillSpec{}, fmt.Errorf("%w: prefill spec %q: unknown option %q (want bootstrap=HOST:PORT, events=tcp://HOST:PORT, replay=tcp://HOST:PORT or id=NAME)", ErrConfig, s, kv)
		}
		host, port, err := net.SplitHostPort(v)
		if err != nil || host == "" {
			return PrefillSpec{}, fmt.Errorf("%w: prefill spec %q: bootstrap %q is not HOST:PORT", ErrConfig, s, v)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return PrefillSpec{}, fmt.Errorf("%w: prefill spec %q: bad bootstrap port %q", ErrConfig, s, port)
		}
		sp.Bootstrap = v
	}
	return sp, nil
}

func parseBaseURL(s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w: instance %q is not an http(s)://host:port URL", ErrConfig, s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%w: instance %q: no query or fragment allowed", ErrConfig, s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}
