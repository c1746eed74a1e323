package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupported reports a checkpoint feature this engine does not implement.
var ErrUnsupported = errors.New("model: unsupported checkpoint")

// Config is the subset of a Hugging Face LlamaConfig (config.json) that the
// engine implements. JSON names follow transformers.
type Config struct {
	Architectures         []string        `json:"architectures,omitempty"`
	ModelType             string          `json:"model_type"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      int             `json:"num_key_value_heads"`
	HeadDim               int             `json:"head_dim,omitempty"`
	VocabSize             int             `json:"vocab_size"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             float64         `json:"rope_theta"`
	TieWordEmbeddings     bool            `json:"tie_word_embeddings"`
	HiddenAct             string          `json:"hidden_act,omitempty"`
	BOSTokenID            int             `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id,omitempty"` // int or [int]
	TorchDtype            string          `json:"torch_dtype,omitempty"`
	RopeScaling           json.RawMessage `json:"rope_scaling,omitempty"`
	AttentionBias         bool            `json:"attention_bias,omitempty"`
	MLPBias               bool            `json:"mlp_bias,omitempty"`
}

// EOS returns the end-of-sequence token ids.
func (c *Config) EOS() []int {
	if len(c.EOSTokenID) == 0 || string(c.EOSTokenID) == "null" {
		return nil
	}
	var one int
	if err := json.Unmarshal(c.EOSTokenID, &one); err == nil {
		return []int{one}
	}
	var many []int
	if err := json.Unmarshal(c.EOSTokenID, &many); err == nil {
		return many
	}
	return nil
}

// Dim is the per-head dimension.
func (c *Config) Dim() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	if c.NumAttentionHeads == 0 {
		return 0
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// Validate checks that the config describes a model this engine can run and
// fills defaults (eps, theta, kv heads).
func (c *Config) Validate() error {
	switch strings.ToLower(c.ModelType) {
	case "llama", "mistral", "":
	default:
		return fmt.Errorf("%w: model_type %q (only llama-family models are implemented)", ErrUnsupported, c.ModelType)
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return fmt.Errorf("%w: hidden_act %q (only silu)", ErrUnsupported, c.HiddenAct)
	}
	if len(c.RopeScaling) > 0 && string(c.RopeScaling) != "null" {
		return fmt.Errorf("%w: rope_scaling is not implemented", ErrUnsupported)
	}
	if c.AttentionBias || c.MLPBias {
		return fmt.Errorf("%w: attention_bias/mlp_bias are not implemented", ErrUnsupported)
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-5
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.HiddenSize <= 0 || c.IntermediateSize <= 0 || c.NumHiddenLayers <= 0 || c.NumAttentionHeads <= 0 ||
		c.VocabSize <= 0 || c.MaxPositionEmbeddings <= 0 {
		return fmt.Errorf("%w: sizes must be positive (hidden %d, intermediate %d, layers %d, heads %d, vocab %d, max positions %d)",
			ErrUnsupported, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.VocabSize, c.MaxPositionEmbeddings)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("%w: %d attention heads not a multiple of %d kv heads", ErrUnsupported, c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.Dim()%2 != 0 || c.Dim() <= 0 {
		return fmt.Errorf("%w: head dim %d must be even", ErrUnsupported, c.Dim())
	}
	if c.MaxPositionEmbeddings > 1<<20 || c.HiddenSize > 1<<16 || c.VocabSize > 1<<22 {
		return fmt.Errorf("%w: sizes too large for this CPU engine", ErrUnsupported)
	}
	return nil
}

// Builtin configurations. Both use the byte-level tokenizer's vocabulary
// (256 bytes + 4 specials: 256 <|bos|>, 257 <|eos|>, 258 <|pad|>, 259
// <|sep|>).
var builtins = map[string]Config{
	"tiny": {
		ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
		HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 16, VocabSize: 260, MaxPositionEmbeddings: 1024, RMSNormEps: 1e-5, RopeTheta: 10000,
		TieWordEmbeddings: false, HiddenAct: "silu", BOSTokenID: 256, EOSTokenID: json.RawMessage("257"), TorchDtype: "float32",
	},
	// tiny-tp is tiny with one KV head per query head (4 KV heads), so it
	// splits across 1, 2 or 4 tensor-parallel ranks.
	"tiny-tp": {
		ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
		HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 4,
		HeadDim: 16, VocabSize: 260, MaxPositionEmbeddings: 1024, RMSNormEps: 1e-5, RopeTheta: 10000,
		TieWordEmbeddings: false, HiddenAct: "silu", BOSTokenID: 256, EOSTokenID: json.RawMessage("257"), TorchDtype: "float32",
	},
	// wide-kv has the KV geometry of one layer of Llama-3-8B (8 KV heads
	// of 128 dimensions, 8 KiB of float32 K and V per token and layer) on
	// 4 layers (32 KiB per token) around tiny compute (hidden size 64), so
	// that moving a prompt's KV between engines is as large per layer and
	// per head as with a real model while its prefill stays fast on a CPU.
	// It splits across 1, 2, 4 or 8 tensor-parallel ranks.
	"wide-kv": {
		ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
		HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 4, NumAttentionHeads: 8, NumKeyValueHeads: 8,
		HeadDim: 128, VocabSize: 260, MaxPositionEmbeddings: 1024, RMSNormEps: 1e-5, RopeTheta: 10000,
		TieWordEmbeddings: false, HiddenAct: "silu", BOSTokenID: 256, EOSTokenID: json.RawMessage("257"), TorchDtype: "float32",
	},
	"small": {
		ModelType: "llama", Architectures: []string{"LlamaForCausalLM"},
		HiddenSize: 256, IntermediateSize: 640, NumHiddenLayers: 6, NumAttentionHeads: 8, NumKeyValueHeads: 2,
		HeadDim: 32, VocabSize: 260, MaxPositionEmbeddings: 4096, RMSNormEps: 1e-5, RopeTheta: 10000,
		TieWordEmbeddings: false, HiddenAct: "silu", BOSTokenID: 256, EOSTokenID: json.RawMessage("257"), TorchDtype: "float32",
	},
}

// BuiltinNames lists the built-in configurations.
func BuiltinNames() []string { return []string{"tiny", "tiny-tp", "wide-kv", "small"} }

// Builtin returns a copy of a built-in configuration.
func Builtin(name string) (Config, error) {
	c, ok := builtins[name]
	if !ok {
		return Config{}, fmt.Errorf("model: unknown built-in config %q (have tiny, tiny-tp, wide-kv, small)", name)
	}
	c.Architectures = append([]string(nil), c.Architectures...)
	return c, nil
}
