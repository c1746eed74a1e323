package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/kvcache-go/mooncake/internal/httpjson"
)

// ErrBadRequest wraps every request decoding or validation problem (400).
var ErrBadRequest = errors.New("bad request")

// ErrUnknownModel is a request naming a model this server does not serve (404).
var ErrUnknownModel = errors.New("model not found")

// maxBody bounds request bodies.
const maxBody = 8 << 20

// commonParams are the generation fields shared by both endpoints. Fields
// we accept only at their default value are checked in validate.
type commonParams struct {
	Model               string         `json:"model"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Temperature         *float64       `json:"temperature"`
	TopP                *float64       `json:"top_p"`
	N                   *int           `json:"n"`
	Seed                *int64         `json:"seed"`
	Stop                stopField      `json:"stop"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options"`
	KVTransferParams    map[string]any `json:"kv_transfer_params"`
	// SGLang's P/D fields (its routers add them to the body of both
	// halves); folded into KVTransferParams for the connector.
	BootstrapHost    *string            `json:"bootstrap_host"`
	BootstrapPort    json.RawMessage    `json:"bootstrap_port"`
	BootstrapRoom    json.RawMessage    `json:"bootstrap_room"`
	CacheSalt        string             `json:"cache_salt"`
	IgnoreEOS        bool               `json:"ignore_eos"`
	ReturnTokenIDs   bool               `json:"return_token_ids"`
	User             string             `json:"user"`
	PresencePenalty  *float64           `json:"presence_penalty"`
	FrequencyPenalty *float64           `json:"frequency_penalty"`
	Logprobs         json.RawMessage    `json:"logprobs"`
	LogitBias        map[string]float64 `json:"logit_bias"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// stopField is a string or a list of strings.
type stopField []string

func (s *stopField) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = stopField{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop must be a string or a list of strings")
	}
	*s = many
	return nil
}

// promptField is a string, a list of token ids, or a one-element list of either.
type promptField struct {
	text   *string
	tokens []int
}

func (p *promptField) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		p.text = &s
		return nil
	}
	var toks []int
	if err := json.Unmarshal(b, &toks); err == nil {
		p.tokens = toks
		if toks == nil {
			p.tokens = []int{}
		}
		return nil
	}
	var strs []string
	if err := json.Unmarshal(b, &strs); err == nil {
		if len(strs) != 1 {
			return errors.New("prompt: batches of prompts are not supported; send one prompt per request")
		}
		p.text = &strs[0]
		return nil
	}
	var lists [][]int
	if err := json.Unmarshal(b, &lists); err == nil {
		if len(lists) != 1 {
			return errors.New("prompt: batches of prompts are not supported; send one prompt per request")
		}
		p.tokens = lists[0]
		return nil
	}
	return errors.New("prompt must be a string, a list of token ids, or a one-element list of either")
}

type completionRequest struct {
	commonParams
	Prompt *promptField `json:"prompt"`
	Echo   bool         `json:"echo"`
	Suffix *string      `json:"suffix"`
	BestOf *int         `json:"best_of"`
}

type chatMessage struct {
	Role    string      `json:"role"`
	Content chatContent `json:"content"`
	Name    string      `json:"name"`
}

// chatContent is a string or a list of {type:"text", text} parts.
type chatContent string

func (c *chatContent) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = chatContent(s)
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return errors.New("message content must be a string or a list of text parts")
	}
	var sb strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return fmt.Errorf("message content part of type %q is not supported (text only)", p.Type)
		}
		sb.WriteString(p.Text)
	}
	*c = chatContent(sb.String())
	return nil
}

type chatRequest struct {
	commonParams
	Messages []chatMessage `json:"messages"`
}

// decode reads one JSON object into v, rejecting unknown fields, wrong
// types and trailing data.
func decode(r io.Reader, v any) error {
	body, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
	}
	if len(body) > maxBody {
		return fmt.Errorf("%w: body larger than %d bytes", ErrBadRequest, maxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return typeError(te)
		}
		return fmt.Errorf("%w: invalid JSON: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON object", ErrBadRequest)
	}
	return nil
}

// typeError words a JSON value of the wrong type for the client: the field
// as it sent it (without the Go structs it is decoded into) and the kind of
// value it must be; the error names the field in "param".
func typeError(te *json.UnmarshalTypeError) error {
	field := te.Field
	if i := strings.LastIndex(field, "commonParams."); i >= 0 {
		field = field[:i] + field[i+len("commonParams."):]
	}
	want := "of type " + te.Type.String()
	switch te.Type.Kind() {
	case reflect.Float32, reflect.Float64:
		want = "a finite number"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "an integer"
	case reflect.String:
		want = "a string"
	case reflect.Bool:
		want = "a boolean"
	case reflect.Slice, reflect.Array:
		want = "a list"
	case reflect.Map, reflect.Struct:
		want = "an object"
	}
	if field == "" {
		return fmt.Errorf("%w: the request must be a JSON object", ErrBadRequest)
	}
	return httpjson.Param(field, fmt.Errorf("%w: %s must be %s", ErrBadRequest, field, want))
}

type usage struct {
	PromptTokens        int            `json:"prompt_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	PromptTokensDetails *tokensDetails `json:"prompt_tokens_details,omitempty"`
}

type tokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	TokenIDs     []int   `json:"token_ids,omitempty"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChoice struct {
	Index        int        `json:"index"`
	Message      *chatDelta `json:"message,omitempty"`
	Delta        *chatDelta `json:"delta,omitempty"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
	TokenIDs     []int      `json:"token_ids,omitempty"`
}

type response struct {
	ID               string         `json:"id"`
	Object           string         `json:"object"`
	Created          int64          `json:"created"`
	Model            string         `json:"model"`
	Choices          any            `json:"choices"`
	Usage            *usage         `json:"usage,omitempty"`
	PromptTokenIDs   []int          `json:"prompt_token_ids,omitempty"`
	KVTransferParams map[string]any `json:"kv_transfer_params,omitempty"`
}
