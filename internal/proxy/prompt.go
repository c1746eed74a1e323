package proxy

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvcache-go/mooncake/internal/tokenizer"
)

// PromptTokens is the prompt as our engines tokenize it (the byte-level
// tokenizer: BOS and the text's bytes, the chat template for messages, or
// the token ids given), for the KV-event prefix index.
func PromptTokens(endpoint string, req Body) []int {
	var tk tokenizer.ByteLevel
	if strings.HasSuffix(endpoint, "/chat/completions") {
		return tk.ApplyChat(chatMessages(req))
	}
	switch pr := req["prompt"].(type) {
	case string:
		return tk.Encode(pr, true)
	case []any:
		var ids []int
		for _, e := range pr {
			n, ok := e.(json.Number)
			if !ok {
				return nil
			}
			v, err := n.Int64()
			if err != nil {
				return nil
			}
			ids = append(ids, int(v))
		}
		return ids
	}
	return nil
}

// chatMessages are a chat request's messages, role and text. A message's
// content is an open JSON value (a string or a list of parts), read by its
// type.
func chatMessages(req Body) []tokenizer.Message {
	msgs, _ := req["messages"].([]any)
	var out []tokenizer.Message
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		role, _ := mm["role"].(string)
		out = append(out, tokenizer.Message{Role: role, Content: contentText(mm["content"])})
	}
	return out
}

// contentText is a chat message's content: the string, or the text parts
// of a list of parts joined; other shapes give "".
func contentText(content any) string {
	var sb strings.Builder
	switch c := content.(type) {
	case string:
		sb.WriteString(c)
	case []any:
		for _, part := range c {
			pm, _ := part.(map[string]any)
			if t, ok := pm["text"].(string); ok {
				sb.WriteString(t)
			}
		}
	}
	return sb.String()
}

// PromptText extracts the prompt text of a completions or chat request, for
// prefix hashing. Unknown shapes give "".
func PromptText(endpoint string, req Body) string {
	var sb strings.Builder
	if strings.HasSuffix(endpoint, "/chat/completions") {
		for _, m := range chatMessages(req) {
			sb.WriteString(m.Role)
			sb.WriteByte(0)
			sb.WriteString(m.Content)
			sb.WriteByte(0)
		}
		return sb.String()
	}
	switch pr := req["prompt"].(type) {
	case string:
		return pr
	case []any:
		for _, e := range pr {
			switch v := e.(type) {
			case string:
				sb.WriteString(v)
			case json.Number:
				sb.WriteString(v.String())
				sb.WriteByte(' ')
			case []any:
				for _, t := range v {
					fmt.Fprint(&sb, t, " ")
				}
			}
		}
	}
	return sb.String()
}
