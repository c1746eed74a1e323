package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/httpjson"
)

// IndexerConfig points the proxy at a remote KV cache indexer speaking
// Mooncake's Indexer API (`mooncake conductor`, Mooncake's conductor,
// Dynamo's standalone indexer): per request the proxy POSTs the prompt's
// token ids to URL/query and routes on the tiered prefix it answers.
type IndexerConfig struct {
	// URL is the indexer's base URL ("" none: the embedded index).
	URL string
	// Model is the "model" of queries ("": the request's "model" field).
	Model string
	// BlockSize is the engines' block size in tokens (the proxy's
	// EventBlockSize).
	BlockSize int
	// Tenant is the "tenant_id" of queries ("": the indexer's default).
	Tenant string
	// Timeout bounds one query (default 200ms); a query that fails or
	// times out routes the request without cache information (counted).
	Timeout time.Duration
}

// indexer queries a remote indexer.
type indexer struct {
	cfg    IndexerConfig
	client *http.Client
}

// indexerQuery is the /query body.
type indexerQuery struct {
	Model     string `json:"model"`
	TokenIDs  []int  `json:"token_ids"`
	BlockSize int    `json:"block_size"`
	Tenant    string `json:"tenant_id,omitempty"`
}

// query returns each instance's cached prefix of tokens, in blocks, keyed
// by the indexer's instance_id.
func (x *indexer) query(ctx context.Context, model string, tokens []int) (map[string]TierBlocks, error) {
	if x.cfg.Model != "" {
		model = x.cfg.Model
	}
	body, _ := json.Marshal(indexerQuery{Model: model, TokenIDs: tokens, BlockSize: x.cfg.BlockSize, Tenant: x.cfg.Tenant})
	raw, err := httpjson.Post(ctx, x.client, x.cfg.URL+"/query", body, x.cfg.Timeout, 16<<20, "indexer")
	if err != nil {
		return nil, err
	}
	return parseIndexerAnswer(raw, x.cfg.BlockSize)
}

// parseIndexerAnswer reads {tenant: {instance: {longest_matched, GPU, CPU,
// DISK, ...}}} (Mooncake's shape; medium names in any case, a missing tier
// counting as the one above it) or the same instance map under
// "instances" (later drafts), into blocks of blockSize tokens.
func parseIndexerAnswer(raw []byte, blockSize int) (map[string]TierBlocks, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("indexer: answer is not a JSON object: %w", err)
	}
	out := map[string]TierBlocks{}
	add := func(inst map[string]map[string]json.RawMessage) {
		for id, fields := range inst {
			get := func(names ...string) (int, bool) {
				for k, v := range fields {
					for _, n := range names {
						if strings.EqualFold(k, n) {
							var x int
							if json.Unmarshal(v, &x) == nil {
								return x, true
							}
						}
					}
				}
				return 0, false
			}
			longest, _ := get("longest_matched")
			dev, _ := get("GPU", "device", "G1")
			host, ok := get("CPU", "host", "G2")
			if !ok {
				host = dev
			}
			disk, ok := get("DISK", "G3")
			if !ok {
				disk = max(host, longest)
			}
			dev = max(dev, 0)
			host = max(host, dev)
			disk = max(disk, host)
			out[id] = TierBlocks{Device: dev / blockSize, Host: host / blockSize, Disk: disk / blockSize}
		}
	}
	if inst, ok := top["instances"]; ok {
		var m map[string]map[string]json.RawMessage
		if err := json.Unmarshal(inst, &m); err != nil {
			return nil, fmt.Errorf("indexer: instances: %w", err)
		}
		add(m)
		return out, nil
	}
	for _, v := range top {
		var m map[string]map[string]json.RawMessage
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, fmt.Errorf("indexer: tenant entry: %w", err)
		}
		add(m)
	}
	return out, nil
}
