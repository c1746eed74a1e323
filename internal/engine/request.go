package engine

import (
	"math/rand/v2"

	"github.com/kvcache-go/mooncake/internal/kvcache"
)

// SamplingParams controls generation for one request.
type SamplingParams struct {
	// MaxTokens is the number of tokens to generate (>= 1).
	MaxTokens int
	// Temperature 0 means greedy (argmax, lowest id on ties).
	Temperature float64
	// TopP in (0, 1] keeps the smallest set of most likely tokens whose
	// probabilities sum to at least TopP (0 means 1: no cut).
	TopP float64
	// Seed seeds sampling when Temperature > 0. Without a seed the engine
	// derives one from the request id, so a request is still reproducible.
	Seed *uint64
	// StopTokenIDs end generation when produced (the token is kept in the
	// output; the EOS token of the model is always a stop token unless
	// IgnoreEOS).
	StopTokenIDs []int
	// StopSequences end generation when the output ends with one of them
	// (the sequence is kept in the output; the server trims it).
	StopSequences [][]int
	IgnoreEOS     bool
}

// Request is what a caller submits.
type Request struct {
	ID     string
	Prompt []int
	Params SamplingParams
	// KVTransferParams is passed to the connector untouched (from the HTTP
	// request's kv_transfer_params).
	KVTransferParams map[string]any
	// CacheSalt separates prefix-cache namespaces (tenants); it is the salt
	// of the block hash chain.
	CacheSalt string
}

// Status is where a request is in its life.
type Status int

// Request states.
const (
	StatusWaiting Status = iota
	StatusWaitingForRemoteKVs
	StatusRunning
	StatusPreempted
	StatusFinished
)

func (s Status) String() string {
	switch s {
	case StatusWaiting:
		return "WAITING"
	case StatusWaitingForRemoteKVs:
		return "WAITING_FOR_REMOTE_KVS"
	case StatusRunning:
		return "RUNNING"
	case StatusPreempted:
		return "PREEMPTED"
	case StatusFinished:
		return "FINISHED"
	}
	return "UNKNOWN"
}

// Finish reasons.
const (
	FinishStop   = "stop"
	FinishLength = "length"
	FinishAbort  = "abort"
	FinishError  = "error"
)

// ReqState is the engine's record of an admitted request. Connectors read it
// through its methods; they must not modify returned slices. It is only
// accessed from the engine's step goroutine.
type ReqState struct {
	id        string
	params    SamplingParams
	kvParams  map[string]any
	salt      string
	prompt    []int
	tokens    []int // prompt + output
	status    Status
	blocks    []int
	hashes    []kvcache.BlockHash
	computed  int
	cachedHit int // prompt tokens found in the local prefix cache or loaded externally at admission
	rng       *rand.Rand
	logprobs  []float32 // log-softmax of the logits at each output token
	seeded    bool      // the first output token came from the connector
	stream    *Stream

	numLocal      int  // tokens found in the local prefix cache at admission
	numExternal   int  // tokens promised by the connector at admission
	numHashed     int  // leading blocks registered in the prefix cache
	invalidFrom   int  // first token position whose external KV failed to load, -1 if none
	admitted      bool // blocks were allocated at least once
	finishReason  string
	numPreemption int
	blockSize     int
}

// ID is the request id.
func (r *ReqState) ID() string { return r.id }

// PromptTokens are the prompt's token ids.
func (r *ReqState) PromptTokens() []int { return r.prompt }

// AllTokens are the prompt followed by the tokens generated so far.
func (r *ReqState) AllTokens() []int { return r.tokens }

// NumOutputTokens is the number of generated tokens.
func (r *ReqState) NumOutputTokens() int { return len(r.tokens) - len(r.prompt) }

// KVTransferParams are the request's kv_transfer_params (may be nil).
func (r *ReqState) KVTransferParams() map[string]any { return r.kvParams }

// CacheSalt is the request's prefix-cache salt.
func (r *ReqState) CacheSalt() string { return r.salt }

// BlockIDs is the current block table: block i holds token positions
// [i*BlockSize, (i+1)*BlockSize).
func (r *ReqState) BlockIDs() []int { return r.blocks }

// BlockHashes are the identities (docs/kv-block-identity.md) of every full
// block of AllTokens, salted with CacheSalt.
func (r *ReqState) BlockHashes() []kvcache.BlockHash {
	r.hashes = kvcache.AppendBlockHashes(r.hashes, r.salt, r.blockSize, r.tokens)
	return r.hashes
}

// NumComputedTokens is the number of leading tokens whose KV is in the cache.
func (r *ReqState) NumComputedTokens() int { return r.computed }

// Status is the request's state.
func (r *ReqState) Status() Status { return r.status }

// MaxTokens is the request's generation limit.
func (r *ReqState) MaxTokens() int { return r.params.MaxTokens }

// FinishReason is why the request finished (FinishStop, FinishLength,
// FinishAbort, FinishError); empty while it runs. RequestFinished sees it
// set.
func (r *ReqState) FinishReason() string { return r.finishReason }

// OutputLogprobs are the log probabilities (log-softmax of the model's raw
// logits, before temperature) of the generated tokens, one per output
// token. A first token taken from the connector (FirstTokenSource) carries
// the logprob the connector gave.
func (r *ReqState) OutputLogprobs() []float32 { return r.logprobs }

// FirstTokenFromConnector reports whether the first output token was taken
// from the connector (FirstTokenSource) instead of computed here.
func (r *ReqState) FirstTokenFromConnector() bool { return r.seeded }
