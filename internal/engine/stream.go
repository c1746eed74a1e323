package engine

import (
	"context"
	"sync"
)

// Output is a batch of progress for one request.
type Output struct {
	RequestID string
	// NewTokens were generated since the previous Output.
	NewTokens []int
	Finished  bool
	// FinishReason is one of FinishStop, FinishLength, FinishAbort,
	// FinishError when Finished.
	FinishReason string
	// Err is set when FinishReason is FinishError.
	Err error
	// KVTransferParams is what the connector returned from RequestFinished.
	KVTransferParams map[string]any
	NumPromptTokens  int
	NumOutputTokens  int
	// NumCachedTokens is the number of prompt tokens that were not computed
	// by this engine (local prefix cache hit or external load).
	NumCachedTokens int
}

// Stream delivers a request's outputs. The engine never blocks on a slow
// reader: outputs accumulate until Next takes them.
type Stream struct {
	id     string
	mu     sync.Mutex
	notify chan struct{}
	tokens []int
	final  *Output
	done   bool
	abort  func(id string)
}

func newStream(id string, abort func(string)) *Stream {
	return &Stream{id: id, notify: make(chan struct{}, 1), abort: abort}
}

// ID is the request id.
func (s *Stream) ID() string { return s.id }

func (s *Stream) push(tokens []int, final *Output) {
	s.mu.Lock()
	s.tokens = append(s.tokens, tokens...)
	if final != nil {
		s.final = final
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next waits for progress and returns everything generated since the last
// call. It returns ok == false after the final output was returned. If ctx
// ends first, Next aborts the request and returns ctx's error.
func (s *Stream) Next(ctx context.Context) (out Output, ok bool, err error) {
	for {
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			return Output{}, false, nil
		}
		if len(s.tokens) > 0 || s.final != nil {
			out = Output{RequestID: s.id, NewTokens: s.tokens}
			s.tokens = nil
			if s.final != nil {
				f := *s.final
				f.NewTokens = out.NewTokens
				out = f
				s.done = true
			}
			s.mu.Unlock()
			return out, true, nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			s.abort(s.id)
			return Output{}, false, ctx.Err()
		}
	}
}

// Collect reads the stream to its end and returns all generated tokens and
// the final output.
func (s *Stream) Collect(ctx context.Context) ([]int, Output, error) {
	var toks []int
	for {
		out, ok, err := s.Next(ctx)
		if err != nil {
			return toks, out, err
		}
		if !ok {
			return toks, Output{}, nil
		}
		toks = append(toks, out.NewTokens...)
		if out.Finished {
			return toks, out, nil
		}
	}
}
