package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
)

// Protocols: what the proxy sends upstream (Config.Protocol, --protocol).
// docs/pd.md has the exact bodies of each.
const (
	// ProtocolMooncake is ours (default): transfer_id "xfer-<uuid>" to both
	// halves, remote_bootstrap_addr (host:port) and remote_engine_id to
	// decode, both at once.
	ProtocolMooncake = "mooncake"
	// ProtocolVLLM is vLLM's example proxy (mooncake_connector_proxy.py):
	// X-Request-Id <uuid> on both halves, no transfer id; decode gets
	// bootstrap_server_host and bootstrap_server_port; both at once.
	ProtocolVLLM = "vllm"
	// ProtocolVLLMTransferID is vLLM's reworked Mooncake connector:
	// transfer_id, remote_bootstrap_addr as "http://host:port",
	// remote_engine_id (from /query, either registry shape); both at once.
	ProtocolVLLMTransferID = "vllm-transfer-id"
	// ProtocolVLLMSeed is vLLM's first Mooncake connector: prefill first
	// ({do_remote_decode: true}, X-Request-Id <uuid>); its answer's
	// kv_transfer_params go to decode unchanged, with the same X-Request-Id.
	ProtocolVLLMSeed = "vllm-seed"
	// ProtocolSGLang is SGLang's routers: the same body to both halves with
	// bootstrap_host, bootstrap_port and bootstrap_room (a random 63-bit
	// integer) added; both at once.
	ProtocolSGLang = "sglang"
)

// Protocols lists the accepted Config.Protocol values.
var Protocols = []string{ProtocolMooncake, ProtocolVLLM, ProtocolVLLMTransferID, ProtocolVLLMSeed, ProtocolSGLang}

func validProtocol(p string) bool {
	for _, q := range Protocols {
		if p == q {
			return true
		}
	}
	return false
}

// Target is the prefill instance a request's halves name.
type Target struct {
	Bootstrap string // host:port of its bootstrap server
	EngineID  string // from its registry ("" when the protocol has none)
}

// Halves is what one protocol sends upstream for one request.
type Halves struct {
	// Key pairs the halves upstream: the transfer id, the X-Request-Id, or
	// "sglang-room-<room>" (what our engines file the transfer under and
	// POST /release names). The proxy reports it in X-Transfer-Id.
	Key string
	// RequestID, when set, is the X-Request-Id of both halves.
	RequestID string
	// Prefill and Decode are the bodies; Decode is nil for ProtocolVLLMSeed
	// (SeedDecodeBody builds it from prefill's answer).
	Prefill, Decode []byte
}

// BuildHalves returns the upstream requests of protocol for req; id is a
// fresh uuid and room a fresh random bootstrap room (< 2^63).
func BuildHalves(protocol string, req map[string]any, t Target, id string, room uint64) (Halves, error) {
	host, port, _ := net.SplitHostPort(t.Bootstrap)
	portN, _ := strconv.Atoi(port)
	switch protocol {
	case ProtocolMooncake, "":
		p, d := BuildBodies(req, "xfer-"+id, t.Bootstrap, t.EngineID)
		return Halves{Key: "xfer-" + id, Prefill: p, Decode: d}, nil
	case ProtocolVLLMTransferID:
		tid := "xfer-" + id
		p := prefillBody(req, map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "transfer_id": tid})
		d := decodeBody(req, map[string]any{"do_remote_decode": false, "do_remote_prefill": true, "transfer_id": tid,
			"remote_bootstrap_addr": "http://" + t.Bootstrap, "remote_engine_id": t.EngineID})
		return Halves{Key: tid, Prefill: p, Decode: d}, nil
	case ProtocolVLLM:
		p := prefillBody(req, map[string]any{"do_remote_decode": true, "do_remote_prefill": false})
		d := decodeBody(req, map[string]any{"do_remote_decode": false, "do_remote_prefill": true,
			"bootstrap_server_host": host, "bootstrap_server_port": portN})
		return Halves{Key: id, RequestID: id, Prefill: p, Decode: d}, nil
	case ProtocolVLLMSeed:
		p := prefillBody(req, map[string]any{"do_remote_decode": true})
		return Halves{Key: id, RequestID: id, Prefill: p}, nil
	case ProtocolSGLang:
		room &= 1<<63 - 1
		b := make(map[string]any, len(req)+3)
		for k, v := range req {
			b[k] = v
		}
		b["bootstrap_host"], b["bootstrap_port"], b["bootstrap_room"] = host, portN, room
		body, _ := json.Marshal(b)
		return Halves{Key: "sglang-room-" + strconv.FormatUint(room, 10), Prefill: body, Decode: body}, nil
	}
	return Halves{}, fmt.Errorf("%w: unknown protocol %q", ErrConfig, protocol)
}

// prefillBody is req as a prefill half: one token, not streamed, with kv.
func prefillBody(req map[string]any, kv map[string]any) []byte {
	pb := make(map[string]any, len(req)+2)
	for k, v := range req {
		pb[k] = v
	}
	pb["max_tokens"] = 1
	if _, ok := pb["max_completion_tokens"]; ok {
		pb["max_completion_tokens"] = 1
	}
	pb["stream"] = false
	delete(pb, "stream_options")
	pb["kv_transfer_params"] = kv
	b, _ := json.Marshal(pb)
	return b
}

// decodeBody is req with kv.
func decodeBody(req map[string]any, kv map[string]any) []byte {
	db := make(map[string]any, len(req)+1)
	for k, v := range req {
		db[k] = v
	}
	db["kv_transfer_params"] = kv
	b, _ := json.Marshal(db)
	return b
}

// errNoSeedParams: a seed-protocol prefill answered without params.
var errNoSeedParams = errors.New("prefill answered without kv_transfer_params")

// SeedDecodeBody is the decode half of ProtocolVLLMSeed: req with the
// kv_transfer_params of prefill's answer, unchanged.
func SeedDecodeBody(req map[string]any, prefillAnswer []byte) ([]byte, error) {
	a, err := decodeObject(prefillAnswer)
	if err != nil {
		return nil, fmt.Errorf("prefill answer: %v", err)
	}
	kv, ok := a["kv_transfer_params"].(map[string]any)
	if !ok || len(kv) == 0 {
		return nil, errNoSeedParams
	}
	return decodeBody(req, kv), nil
}

// decodeObject parses a JSON object, keeping numbers exact.
func decodeObject(raw []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("request body is not a JSON object: %v", err)
	}
	if m == nil {
		return nil, errors.New("request body is not a JSON object")
	}
	if d.More() {
		return nil, errors.New("request body has trailing data after the JSON object")
	}
	return m, nil
}

// BuildBodies returns the two halves of a P/D request: the prefill body
// (max_tokens 1, no streaming, do_remote_decode) and the decode body (the
// original request plus do_remote_prefill and where to pull from).
func BuildBodies(req map[string]any, transferID, bootstrapAddr, engineID string) (prefill, decode []byte) {
	pb := make(map[string]any, len(req)+2)
	db := make(map[string]any, len(req)+1)
	for k, v := range req {
		pb[k], db[k] = v, v
	}
	pb["max_tokens"] = 1
	if _, ok := pb["max_completion_tokens"]; ok {
		pb["max_completion_tokens"] = 1
	}
	pb["stream"] = false
	delete(pb, "stream_options")
	pb["kv_transfer_params"] = map[string]any{
		"do_remote_decode": true, "do_remote_prefill": false, "transfer_id": transferID,
	}
	db["kv_transfer_params"] = map[string]any{
		"do_remote_decode": false, "do_remote_prefill": true, "transfer_id": transferID,
		"remote_bootstrap_addr": bootstrapAddr, "remote_engine_id": engineID,
	}
	prefill, _ = json.Marshal(pb)
	decode, _ = json.Marshal(db)
	return prefill, decode
}
