package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvcache-go/mooncake/internal/evict"
	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/model"
)

// Sentinel errors callers branch on.
var (
	ErrInvalidRequest = errors.New("engine: invalid request")
	ErrQueueFull      = errors.New("engine: queue full")
	ErrClosed         = errors.New("engine: closed")
	ErrKVLoad         = errors.New("engine: external KV load failed")
	ErrConnector      = errors.New("engine: connector failed")
)

// KV load failure policies (Config.KVLoadFailurePolicy).
const (
	PolicyRecompute = "recompute"
	PolicyFail      = "fail"
)

// Roles (Config.Role), as vLLM's kv_role.
const (
	RoleBoth     = "both"
	RoleProducer = "producer"
	RoleConsumer = "consumer"
)

// Config configures an Engine. Zero fields take the defaults listed.
type Config struct {
	// Model is required.
	Model *model.Model
	// ModelName names the model in the KV compatibility descriptor and the
	// API (default Model.Name).
	ModelName string
	// TP is the number of tensor-parallel ranks the model's layers split
	// across inside this engine (1): each rank computes its share of the
	// attention heads, KV heads and MLP and keeps its KV heads in its own
	// per-layer regions (model.ForwardTP). It must divide the model's KV
	// head count. Outputs are bit-identical for every TP.
	TP int
	// BlockSize is tokens per KV block (16).
	BlockSize int
	// NumBlocks is the KV cache size in blocks (1024).
	NumBlocks int
	// MaxNumBatchedTokens is the token budget of one step (512): the
	// prefill chunk size limit.
	MaxNumBatchedTokens int
	// MaxNumSeqs bounds running requests (64).
	MaxNumSeqs int
	// MaxModelLen bounds prompt + output tokens (the model's maximum positions).
	MaxModelLen int
	// MaxWaiting bounds requests waiting to start; Submit returns
	// ErrQueueFull beyond it (256).
	MaxWaiting int
	// DisablePrefixCaching turns off local prefix reuse.
	DisablePrefixCaching bool
	// Eviction orders the eviction of cached free KV blocks:
	// evict.KindLRU (default), evict.KindTailFirst or evict.KindRetention
	// (package internal/evict).
	Eviction evict.Kind
	// Allocator allocates the per-layer KV regions (Go heap).
	Allocator kvcache.Allocator
	// Connector is called at vLLM's KV connector points (NoopConnector).
	Connector Connector
	// KVLoadFailurePolicy is PolicyRecompute (default) or PolicyFail.
	KVLoadFailurePolicy string
	// Role is RoleBoth (default), RoleProducer or RoleConsumer; the engine
	// only records it, the connector acts on it.
	Role string
	// PollInterval is how often Run steps while it only waits for the
	// connector (2ms).
	PollInterval time.Duration
	// EOSTokenIDs end generation (the model config's eos_token_id).
	EOSTokenIDs []int
	// Logger receives lifecycle messages (slog.Default()).
	Logger *slog.Logger
	// KVEvents, if set, hears the prefix cache's changes as vLLM's KV
	// events (kvevents.Publisher is one); nil publishes nothing.
	KVEvents KVEvents
}

// KVEvents hears the prefix cache's changes, from the step goroutine; the
// calls must not block. BlockStored: hashes (in prompt order, each the
// parent of the next; parent is the first one's, nil for a sequence's
// first block) now hold tokens (BlockSize per block). BlockRemoved: those
// hashes left the cache. AllBlocksCleared: the cache is empty (sent once
// when the engine starts, so subscribers drop what they knew of a previous
// run).
type KVEvents interface {
	BlockStored(hashes []kvcache.BlockHash, parent *kvcache.BlockHash, tokens []int)
	BlockRemoved(hashes []kvcache.BlockHash)
	AllBlocksCleared()
}

func (c *Config) setDefaults() {
	if c.TP == 0 {
		c.TP = 1
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.NumBlocks == 0 {
		c.NumBlocks = 1024
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = 512
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = 64
	}
	if c.MaxModelLen == 0 && c.Model != nil {
		c.MaxModelLen = c.Model.Config.MaxPositionEmbeddings
	}
	if c.MaxWaiting == 0 {
		c.MaxWaiting = 256
	}
	if c.Connector == nil {
		c.Connector = NoopConnector{}
	}
	if c.KVLoadFailurePolicy == "" {
		c.KVLoadFailurePolicy = PolicyRecompute
	}
	if c.Role == "" {
		c.Role = RoleBoth
	}
	if c.PollInterval == 0 {
		c.PollInterval = 2 * time.Millisecond
	}
	if c.EOSTokenIDs == nil && c.Model != nil {
		c.EOSTokenIDs = c.Model.Config.EOS()
	}
	if c.ModelName == "" && c.Model != nil {
		c.ModelName = c.Model.Name
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first problem with c (after defaults are applied).
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Model == nil:
		return errors.New("engine: Config.Model is required")
	case c.BlockSize <= 0 || c.NumBlocks <= 0:
		return fmt.Errorf("engine: block size %d and num blocks %d must be positive", c.BlockSize, c.NumBlocks)
	case c.MaxNumBatchedTokens <= 0 || c.MaxNumSeqs <= 0 || c.MaxWaiting <= 0:
		return errors.New("engine: batch, sequence and queue limits must be positive")
	case c.MaxModelLen <= 1 || c.MaxModelLen > c.Model.Config.MaxPositionEmbeddings:
		return fmt.Errorf("engine: max model len %d must be in [2, %d]", c.MaxModelLen, c.Model.Config.MaxPositionEmbeddings)
	case c.KVLoadFailurePolicy != PolicyRecompute && c.KVLoadFailurePolicy != PolicyFail:
		return fmt.Errorf("engine: kv load failure policy %q (want recompute or fail)", c.KVLoadFailurePolicy)
	case c.Role != RoleBoth && c.Role != RoleProducer && c.Role != RoleConsumer:
		return fmt.Errorf("engine: role %q (want both, producer or consumer)", c.Role)
	case c.PollInterval < 0:
		return errors.New("engine: negative poll interval")
	}
	if err := c.Model.Config.CheckTP(c.TP); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if _, err := evict.ParseKind(string(c.Eviction)); err != nil {
		return fmt.Errorf("engine: eviction: %w", err)
	}
	return nil
}
