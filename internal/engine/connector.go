package engine

import (
	"context"

	"github.com/kvcache-go/mooncake/internal/kvcache"
)

// Connector moves KV blocks in and out of the engine (prefill/decode
// disaggregation, a KV store). It mirrors vLLM's KVConnectorBase_V1: a
// scheduler half and a worker half, which in this single-process engine are
// one value. The engine calls the hooks from its one step goroutine, never
// concurrently; see doc.go for the exact call order.
type Connector interface {
	SchedulerConnector
	WorkerConnector
}

// MatchPending is returned by GetNumNewMatchedTokens as n when the connector
// does not know yet: the scheduler asks again on a later step.
const MatchPending = -1

// SchedulerConnector is the scheduler-side half.
type SchedulerConnector interface {
	// GetNumNewMatchedTokens returns how many prompt tokens beyond the
	// numLocalComputed already found in the local prefix cache the connector
	// can supply externally. It is called for a waiting request before its
	// blocks are allocated, may be called again on later steps, and must have
	// no side effects. n == MatchPending means "ask again next step".
	// async == true means the tokens arrive asynchronously: after allocation
	// the request waits in StatusWaitingForRemoteKVs until the worker half
	// reports it in GetFinished's doneRecving. A non-nil error fails the
	// request. n must be <= len(prompt) - numLocalComputed.
	GetNumNewMatchedTokens(req *ReqState, numLocalComputed int) (n int, async bool, err error)

	// UpdateStateAfterAlloc is called once the request's blocks are
	// allocated. blockIDs is the request's whole block table (locally cached
	// blocks first); the external tokens occupy token positions
	// [req.NumComputedTokens(), req.NumComputedTokens()+numExternalTokens)
	// (during this call NumComputedTokens is the local prefix-cache hit).
	// Called with numExternalTokens == 0 too.
	UpdateStateAfterAlloc(req *ReqState, blockIDs []int, numExternalTokens int)

	// BuildConnectorMeta is called once at the end of every schedule step
	// (including steps that schedule nothing); it should reset the
	// connector's per-step state. Its result is handed to the worker half
	// with BindConnectorMeta before the step runs.
	BuildConnectorMeta(out *SchedulerOutput) any

	// UpdateConnectorOutput tells the scheduler half what the worker half
	// reported for the step just run.
	UpdateConnectorOutput(out ConnectorOutput)

	// RequestFinished is called exactly once per request that had been
	// admitted, when it finishes for any reason (stop, length, abort, error),
	// before its blocks are freed. blockIDs is its block table. If delayFree
	// is true the engine keeps the blocks until the worker half reports the
	// request in GetFinished's doneSending. kvTransferParams, if non-nil, is
	// returned to the client in the response.
	RequestFinished(req *ReqState, blockIDs []int) (delayFree bool, kvTransferParams map[string]any)
}

// FirstTokenSource is an optional extension of a Connector that receives a
// request's first output token with its KV (a prefill engine sampled it and
// shipped it as aux data). When a request's asynchronous load finished
// (GetFinished's doneRecving) and the loaded KV covers its whole prompt,
// the engine asks FirstToken; with ok the token becomes the request's first
// output (streamed like a sampled one, its logprob recorded, the sampling
// generator advanced as if it had sampled it) and the request's next step
// is a decode step at position len(prompt): the last prompt position is not
// recomputed. Without ok (or a token outside the vocabulary) the engine
// recomputes the last prompt position as usual. Called from the step
// goroutine, after UpdateConnectorOutput.
type FirstTokenSource interface {
	FirstToken(req *ReqState) (token int, logprob float32, ok bool)
}

// WorkerConnector is the worker-side half, called around the model forward.
type WorkerConnector interface {
	// RegisterKVCaches is called once, before the first step, with the KV
	// memory of every layer.
	RegisterKVCaches(kv KVCaches) error
	// BindConnectorMeta hands over BuildConnectorMeta's result for the step.
	BindConnectorMeta(meta any)
	// StartLoadKV starts loading the blocks the metadata asks for.
	StartLoadKV(ctx context.Context) error
	// WaitForLayerLoad blocks until layer's external KV has landed; called
	// before the attention of that layer in every forward.
	WaitForLayerLoad(ctx context.Context, layer int) error
	// SaveKVLayer is called as soon as layer's KV of this step has been
	// written to the cache (before that layer's attention, which only reads
	// it); it may start an asynchronous save and must not block on I/O.
	SaveKVLayer(ctx context.Context, layer int) error
	// WaitForSave blocks until the saves started this step may be
	// considered issued (end of forward).
	WaitForSave(ctx context.Context) error
	// GetFinished is called after every step (even an empty one) with the
	// ids of requests that finished since the last call; it returns the ids
	// whose asynchronous send (delay-freed blocks) or receive (async load)
	// completed.
	GetFinished(finishedReqIDs []string) (doneSending, doneRecving []string)
	// GetBlockIDsWithLoadErrors returns the block ids whose external load
	// failed since the last call.
	GetBlockIDsWithLoadErrors() []int
	// ClearConnectorMeta is called at the end of every step.
	ClearConnectorMeta()
}

// KVCaches describes the engine's KV memory to a connector.
type KVCaches struct {
	Layout kvcache.Layout
	Compat kvcache.Compat
	// Ranks holds, per tensor-parallel rank (Layout.TPSize() of them), one
	// region per layer (Layout.NumLayers), each Layout.LayerBytes() long and
	// holding only that rank's KV heads; see kvcache.Layout for the byte
	// layout. kvcache.Wrap(Layout, Ranks) reads and writes blocks in their
	// TP-independent form.
	Ranks [][][]byte
}

// Regions views the KV memory as kvcache.Regions.
func (kv KVCaches) Regions() (*kvcache.Regions, error) { return kvcache.Wrap(kv.Layout, kv.Ranks) }

// ScheduledRequest is one request in a step.
type ScheduledRequest struct {
	Req *ReqState
	// NumComputedTokens is the number of tokens whose KV was in the cache
	// before this step.
	NumComputedTokens int
	// NumScheduledTokens is the number of tokens computed this step.
	NumScheduledTokens int
	// NewBlockIDs are the blocks added to the request's table this step.
	NewBlockIDs []int
	// BlockIDs is the whole block table after this step's allocation.
	BlockIDs []int
}

// SchedulerOutput is what one schedule step decided.
type SchedulerOutput struct {
	Step      uint64
	Scheduled []ScheduledRequest
	// NewRemoteLoads are requests that moved to StatusWaitingForRemoteKVs
	// this step (their blocks are allocated, nothing is computed for them).
	NewRemoteLoads []ScheduledRequest
	// FinishedReqIDs finished since the previous step.
	FinishedReqIDs []string
	// PreemptedReqIDs lost their blocks this step (they will recompute).
	PreemptedReqIDs []string
}

// ConnectorOutput is what the worker half reported for one step.
type ConnectorOutput struct {
	FinishedSending []string
	FinishedRecving []string
	InvalidBlockIDs []int
}

// NoopConnector does nothing: no external tokens, no delayed frees.
type NoopConnector struct{}

var _ Connector = NoopConnector{}

func (NoopConnector) GetNumNewMatchedTokens(*ReqState, int) (int, bool, error) { return 0, false, nil }
func (NoopConnector) UpdateStateAfterAlloc(*ReqState, []int, int)              {}
func (NoopConnector) BuildConnectorMeta(*SchedulerOutput) any                  { return nil }
func (NoopConnector) UpdateConnectorOutput(ConnectorOutput)                    {}
func (NoopConnector) RequestFinished(*ReqState, []int) (bool, map[string]any)  { return false, nil }
func (NoopConnector) RegisterKVCaches(KVCaches) error                          { return nil }
func (NoopConnector) BindConnectorMeta(any)                                    {}
func (NoopConnector) StartLoadKV(context.Context) error                        { return nil }
func (NoopConnector) WaitForLayerLoad(context.Context, int) error              { return nil }
func (NoopConnector) SaveKVLayer(context.Context, int) error                   { return nil }
func (NoopConnector) WaitForSave(context.Context) error                        { return nil }
func (NoopConnector) GetFinished([]string) ([]string, []string)                { return nil, nil }
func (NoopConnector) GetBlockIDsWithLoadErrors() []int                         { return nil }
func (NoopConnector) ClearConnectorMeta()                                      {}
