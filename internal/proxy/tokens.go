package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/httpjson"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
)

// Tokenizer modes of Config.Tokenizer besides a tokenizer.json path.
const (
	TokenizerByteLevel = "byte-level" // ours, the reference engine's (default)
	TokenizerEngine    = "engine"     // ask a prefill instance: POST /tokenize
)

// promptTokenizer gives a request's prompt token ids as its engine will
// see them, for naming KV blocks.
type promptTokenizer struct {
	mode   string
	file   tokenizer.PromptEncoder
	client *http.Client
}

func newPromptTokenizer(spec string, client *http.Client) (*promptTokenizer, error) {
	switch spec {
	case "", TokenizerByteLevel:
		return &promptTokenizer{mode: TokenizerByteLevel}, nil
	case TokenizerEngine:
		return &promptTokenizer{mode: TokenizerEngine, client: client}, nil
	}
	file, err := tokenizer.LoadFile(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: tokenizer %q: %v", ErrConfig, spec, err)
	}
	return &promptTokenizer{mode: "file", file: file, client: client}, nil
}

// tokens returns the prompt's ids. A tokenizer file encodes completion
// prompts itself (with its template's specials); chat requests need the
// model's chat template, which only the engine applies, so they (and the
// engine mode) ask engineURL's POST /tokenize (vLLM's, ours). nil on
// failure: the request is routed without cache information.
func (t *promptTokenizer) tokens(ctx context.Context, endpoint string, req Body, engineURL string) ([]int, error) {
	chat := strings.HasSuffix(endpoint, "/chat/completions")
	switch {
	case t.mode == TokenizerByteLevel:
		return PromptTokens(endpoint, req), nil
	case t.mode == "file" && !chat:
		switch pr := req["prompt"].(type) {
		case string:
			return t.file.EncodePrompt(pr), nil
		case []any:
			return PromptTokens(endpoint, req), nil // token ids given
		}
		return nil, fmt.Errorf("prompt of type %T", req["prompt"])
	}
	if engineURL == "" {
		return nil, fmt.Errorf("no engine to ask for tokens")
	}
	body := map[string]any{}
	if m, ok := req["model"]; ok {
		body["model"] = m
	}
	if chat {
		body["messages"] = req["messages"]
	} else {
		if ids := PromptTokens(endpoint, req); ids != nil {
			if _, isText := req["prompt"].(string); !isText {
				return ids, nil
			}
		}
		body["prompt"] = req["prompt"]
	}
	raw, _ := json.Marshal(body)
	out, err := httpjson.Post(ctx, t.client, engineURL+"/tokenize", raw, 2*time.Second, 64<<20, "tokenize")
	if err != nil {
		return nil, err
	}
	var tr struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.Unmarshal(out, &tr); err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	return tr.Tokens, nil
}
