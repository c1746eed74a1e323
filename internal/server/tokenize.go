package server

import (
	"fmt"
	"net/http"

	"github.com/kvcache-go/mooncake/internal/httpjson"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
)

// tokenizeRequest is vLLM's POST /tokenize body: a completion prompt
// (add_special_tokens default true: the BOS a prompt gets) or chat
// messages (the chat template applied, as a chat request would be).
type tokenizeRequest struct {
	Model               string        `json:"model"`
	Prompt              *string       `json:"prompt"`
	Messages            []chatMessage `json:"messages"`
	AddSpecialTokens    *bool         `json:"add_special_tokens"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt"`
	ReturnTokenStrs     bool          `json:"return_token_strs"`
}

// handleTokenize answers POST /tokenize in vLLM's shape, {"count",
// "max_model_len", "tokens", "token_strs"}: the token ids this server
// would run the prompt with, so that a router names the same KV blocks.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if err := decode(r.Body, &req); err != nil {
		s.fail(w, err)
		return
	}
	if req.Model != "" && req.Model != s.cfg.ModelName {
		s.fail(w, httpjson.Param("model", fmt.Errorf("%w: the model %q does not exist (this server serves %q)", ErrUnknownModel, req.Model, s.cfg.ModelName)))
		return
	}
	var ids []int
	switch {
	case req.Prompt != nil && req.Messages == nil:
		ids = s.cfg.Tokenizer.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	case req.Messages != nil && req.Prompt == nil:
		msgs := make([]tokenizer.Message, 0, len(req.Messages))
		for _, m := range req.Messages {
			msgs = append(msgs, tokenizer.Message{Role: m.Role, Content: string(m.Content)})
		}
		ids = s.cfg.Tokenizer.ApplyChat(msgs)
	default:
		s.fail(w, httpjson.Param("prompt", fmt.Errorf("%w: send either prompt or messages", ErrBadRequest)))
		return
	}
	var strs any
	if req.ReturnTokenStrs {
		l := make([]string, len(ids))
		for i, id := range ids {
			l[i] = s.cfg.Tokenizer.Decode([]int{id})
		}
		strs = l
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": s.eng.Config().MaxModelLen, "tokens": ids, "token_strs": strs})
}
