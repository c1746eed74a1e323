package master

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvcache-go/mooncake/internal/evict"
)

// Strategy chooses the order in which segments are tried for a put's replicas.
type Strategy string

// Allocation strategies.
const (
	StrategyRandom         Strategy = "random"           // default: preferred segments, then random order
	StrategyFreeRatioFirst Strategy = "free_ratio_first" // the emptiest segments first
	StrategyLocalFirst     Strategy = "local_first"      // the caller's own segments first, then random
)

// Config of the master core. Zero fields take the defaults of DefaultConfig.
type Config struct {
	LeaseTTL          time.Duration // read lease granted by GetReplicaList (10s)
	ClientTTL         time.Duration // a client silent this long is dropped (10s)
	PutTimeout        time.Duration // an unfinished put older than this may be preempted (30s)
	PutReleaseTimeout time.Duration // the space of an unfinished put is released after this (10m)
	SoftPinTTL        time.Duration // default soft pin TTL (30m)
	MaxSoftPinTTL     time.Duration // largest soft pin TTL accepted (24h)
	HighWatermark     float64       // eviction fires when used/capacity passes this (0.90)
	EvictionRatio     float64       // fraction of capacity one eviction frees (0.05)
	// TenantHighWatermark: with tenant quotas, a tenant's own objects are
	// evicted when its charged bytes pass this fraction of its effective
	// byte quota, down to (TenantHighWatermark - EvictionRatio) of it
	// (tenant_evict.go; Mooncake's tenant_eviction_high_watermark_ratio).
	// 0 takes the default 0.90; a negative value turns it off.
	TenantHighWatermark float64
	MaxKeyLen           int      // longest key in bytes (4096; at most 1 MiB)
	MaxReplicas         int      // largest replica count accepted (16)
	Strategy            Strategy // allocation strategy (random)
	Seed                uint64   // seed of the random strategy
	Align               uint64   // allocation granularity in bytes (64)
	// EvictionPolicy orders the objects an eviction takes (internal/evict):
	// "lru" (default), "tail-first" (KV block chains from their tails,
	// see ChainOf) or "retention" (each eviction builds its order afresh,
	// so no chain has turns: the order is TailFirst's).
	EvictionPolicy evict.Kind
	// Durable makes objects self-describing: each allocation starts with an
	// objheader (key, sequence number, size, CRC32C, pins) the client writes
	// with the value, a storage node re-reports the objects it holds when it
	// remounts on a new or restarted master (Restore), and every free zeroes
	// the header first (tombstones, see restore.go). Off: objects are lost
	// with the master, as in Mooncake.
	Durable bool
	// Scrub: a freed extent goes back to the allocator only once the node
	// holding it reports it zeroed (scrub.go), so no object is placed over
	// bytes another put wrote: a reader granted an object (data-path
	// grants) reads what its writer wrote or zeros, never what a removed
	// or evicted object, another tenant's included, left there.
	Scrub bool
	// RestoreWindow is how long after start the master remembers the keys it
	// removed, so that a node remounting late cannot bring back an older
	// version of a key removed meanwhile (2 x ClientTTL).
	RestoreWindow time.Duration
	// Events receives stored/removed notifications (nil = none).
	Events EventSink
	// Memory bounds the master's own memory: new objects are refused with
	// ErrNoSpace above its admission mark (memlimit.go; zero = no limit).
	Memory MemoryLimit
	// Logger receives the membership changes an operator must see at INFO:
	// a client dropped after ClientTTL, a segment unmounted (nil = none).
	Logger *slog.Logger
}

// DefaultConfig returns the defaults (Mooncake's, see shared/reference/mooncake.md).
func DefaultConfig() Config {
	return Config{
		LeaseTTL:            10 * time.Second,
		ClientTTL:           10 * time.Second,
		PutTimeout:          30 * time.Second,
		PutReleaseTimeout:   10 * time.Minute,
		SoftPinTTL:          30 * time.Minute,
		MaxSoftPinTTL:       24 * time.Hour,
		HighWatermark:       0.90,
		EvictionRatio:       0.05,
		TenantHighWatermark: 0.90,
		MaxKeyLen:           4096,
		MaxReplicas:         16,
		Strategy:            StrategyRandom,
		Seed:                1,
		Align:               64,
		EvictionPolicy:      evict.KindLRU,
	}
}

// maxKeyLenLimit bounds Config.MaxKeyLen: an object keeps the length of its
// header (which holds the key) in 32 bits.
const maxKeyLenLimit = 1 << 20

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.LeaseTTL = cmp.Or(c.LeaseTTL, d.LeaseTTL)
	c.ClientTTL = cmp.Or(c.ClientTTL, d.ClientTTL)
	c.PutTimeout = cmp.Or(c.PutTimeout, d.PutTimeout)
	c.PutReleaseTimeout = cmp.Or(c.PutReleaseTimeout, d.PutReleaseTimeout)
	c.SoftPinTTL = cmp.Or(c.SoftPinTTL, d.SoftPinTTL)
	c.MaxSoftPinTTL = cmp.Or(c.MaxSoftPinTTL, d.MaxSoftPinTTL)
	c.HighWatermark = cmp.Or(c.HighWatermark, d.HighWatermark)
	c.EvictionRatio = cmp.Or(c.EvictionRatio, d.EvictionRatio)
	c.TenantHighWatermark = cmp.Or(c.TenantHighWatermark, d.TenantHighWatermark)
	c.MaxKeyLen = cmp.Or(c.MaxKeyLen, d.MaxKeyLen)
	c.MaxReplicas = cmp.Or(c.MaxReplicas, d.MaxReplicas)
	c.Strategy = cmp.Or(c.Strategy, d.Strategy)
	c.Align = cmp.Or(c.Align, d.Align)
	c.EvictionPolicy = cmp.Or(c.EvictionPolicy, d.EvictionPolicy)
	if c.RestoreWindow == 0 {
		c.RestoreWindow = 2 * c.ClientTTL
	}
	return c
}

// Validate reports the first invalid field (after defaults are applied).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.LeaseTTL < 0, c.ClientTTL < 0, c.PutTimeout < 0, c.PutReleaseTimeout < 0, c.SoftPinTTL < 0:
		return fmt.Errorf("master: negative duration in config")
	case c.PutReleaseTimeout < c.PutTimeout:
		return fmt.Errorf("master: put release timeout %v shorter than put timeout %v", c.PutReleaseTimeout, c.PutTimeout)
	case c.SoftPinTTL > c.MaxSoftPinTTL:
		return fmt.Errorf("master: soft pin TTL %v above max %v", c.SoftPinTTL, c.MaxSoftPinTTL)
	case c.HighWatermark <= 0 || c.HighWatermark > 1:
		return fmt.Errorf("master: high watermark %v not in (0,1]", c.HighWatermark)
	case c.EvictionRatio <= 0 || c.EvictionRatio > 1:
		return fmt.Errorf("master: eviction ratio %v not in (0,1]", c.EvictionRatio)
	case c.TenantHighWatermark > 1:
		return fmt.Errorf("master: tenant high watermark %v above 1", c.TenantHighWatermark)
	case c.MaxKeyLen < 1 || c.MaxReplicas < 1:
		return fmt.Errorf("master: max key length and max replicas must be positive")
	case c.MaxKeyLen > maxKeyLenLimit:
		return fmt.Errorf("master: max key length %d above %d", c.MaxKeyLen, maxKeyLenLimit)
	case c.MaxReplicas > maxObjectReplicas:
		return fmt.Errorf("master: max replicas %d above %d", c.MaxReplicas, maxObjectReplicas)
	case c.Align&(c.Align-1) != 0:
		return fmt.Errorf("master: alignment %d is not a power of two", c.Align)
	}
	switch c.Strategy {
	case StrategyRandom, StrategyFreeRatioFirst, StrategyLocalFirst:
	default:
		return fmt.Errorf("master: unknown allocation strategy %q", c.Strategy)
	}
	if _, err := evict.ParseKind(string(c.EvictionPolicy)); err != nil {
		return fmt.Errorf("master: eviction policy: %w", err)
	}
	return nil
}
