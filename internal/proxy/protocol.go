package proxy

import (
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

// The kv_transfer_params each protocol sends, one type per published
// shape. Fields are in the alphabetical order of their JSON names, so a
// body marshals to the bytes a map gave (and the tests pin).

// transferIDPrefill is a prefill half's params in ours and in vLLM's
// reworked connector.
type transferIDPrefill struct {
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	TransferID      string `json:"transfer_id"`
}

// transferIDDecode is a decode half's params in ours (RemoteBootstrapAddr
// host:port) and in vLLM's reworked connector ("http://host:port").
type transferIDDecode struct {
	DoRemoteDecode      bool   `json:"do_remote_decode"`
	DoRemotePrefill     bool   `json:"do_remote_prefill"`
	RemoteBootstrapAddr string `json:"remote_bootstrap_addr"`
	RemoteEngineID      string `json:"remote_engine_id"`
	TransferID          string `json:"transfer_id"`
}

// vllmPrefill is a prefill half's params from vLLM's example proxy.
type vllmPrefill struct {
	DoRemoteDecode  bool `json:"do_remote_decode"`
	DoRemotePrefill bool `json:"do_remote_prefill"`
}

// vllmDecode is a decode half's params from vLLM's example proxy: where
// prefill's bootstrap server is.
type vllmDecode struct {
	BootstrapServerHost string `json:"bootstrap_server_host"`
	BootstrapServerPort int    `json:"bootstrap_server_port"`
	DoRemoteDecode      bool   `json:"do_remote_decode"`
	DoRemotePrefill     bool   `json:"do_remote_prefill"`
}

// seedPrefill is a prefill half's params for vLLM's first connector; its
// decode half carries prefill's answer's params unchanged (SeedDecodeBody).
type seedPrefill struct {
	DoRemoteDecode bool `json:"do_remote_decode"`
}

// sglangBootstrap is what SGLang's routers add to the body of both halves
// (top-level fields, not kv_transfer_params).
type sglangBootstrap struct {
	Host string // bootstrap_host
	Port int    // bootstrap_port
	Room uint64 // bootstrap_room, < 2^63
}

// key is the pairing key our engines file an SGLang transfer under.
func (s sglangBootstrap) key() string { return "sglang-room-" + strconv.FormatUint(s.Room, 10) }

// body is req with s's fields added.
func (s sglangBootstrap) body(req Body) ([]byte, error) {
	b := req.with(3)
	b["bootstrap_host"], b["bootstrap_port"], b["bootstrap_room"] = s.Host, s.Port, s.Room
	return json.Marshal(b)
}

// BuildHalves returns the upstream requests of protocol for req; id is a
// fresh uuid and room a fresh random bootstrap room (< 2^63).
func BuildHalves(protocol string, req Body, t Target, id string, room uint64) (Halves, error) {
	host, port, _ := net.SplitHostPort(t.Bootstrap)
	portN, _ := strconv.Atoi(port)
	var h Halves
	var pkv, dkv any // the halves' kv_transfer_params (dkv nil: no decode body yet)
	switch protocol {
	case ProtocolMooncake, "", ProtocolVLLMTransferID:
		h.Key = "xfer-" + id
		addr := t.Bootstrap
		if protocol == ProtocolVLLMTransferID {
			addr = "http://" + t.Bootstrap
		}
		pkv = transferIDPrefill{DoRemoteDecode: true, TransferID: h.Key}
		dkv = transferIDDecode{DoRemotePrefill: true, TransferID: h.Key, RemoteBootstrapAddr: addr, RemoteEngineID: t.EngineID}
	case ProtocolVLLM:
		h.Key, h.RequestID = id, id
		pkv = vllmPrefill{DoRemoteDecode: true}
		dkv = vllmDecode{DoRemotePrefill: true, BootstrapServerHost: host, BootstrapServerPort: portN}
	case ProtocolVLLMSeed:
		h.Key, h.RequestID = id, id
		pkv = seedPrefill{DoRemoteDecode: true}
	case ProtocolSGLang:
		sg := sglangBootstrap{Host: host, Port: portN, Room: room & (1<<63 - 1)}
		body, err := sg.body(req)
		if err != nil {
			return Halves{}, fmt.Errorf("proxy: %s body: %w", protocol, err)
		}
		return Halves{Key: sg.key(), Prefill: body, Decode: body}, nil
	default:
		return Halves{}, fmt.Errorf("%w: unknown protocol %q", ErrConfig, protocol)
	}
	var err error
	if h.Prefill, err = prefillBody(req, pkv); err != nil {
		return Halves{}, fmt.Errorf("proxy: %s prefill body: %w", protocol, err)
	}
	if dkv != nil {
		if h.Decode, err = decodeBody(req, dkv); err != nil {
			return Halves{}, fmt.Errorf("proxy: %s decode body: %w", protocol, err)
		}
	}
	return h, nil
}

// BuildBodies returns the two halves of a P/D request in our protocol: the
// prefill body (max_tokens 1, no streaming, do_remote_decode) and the
// decode body (the original request plus do_remote_prefill and where to
// pull from). A Body from decodeObject always marshals.
func BuildBodies(req Body, transferID, bootstrapAddr, engineID string) (prefill, decode []byte) {
	prefill, _ = prefillBody(req, transferIDPrefill{DoRemoteDecode: true, TransferID: transferID})
	decode, _ = decodeBody(req, transferIDDecode{DoRemotePrefill: true, TransferID: transferID,
		RemoteBootstrapAddr: bootstrapAddr, RemoteEngineID: engineID})
	return prefill, decode
}

// prefillBody is req as a prefill half: one token, not streamed, with kv.
func prefillBody(req Body, kv any) ([]byte, error) {
	pb := req.with(2)
	pb["max_tokens"] = 1
	if _, ok := pb["max_completion_tokens"]; ok {
		pb["max_completion_tokens"] = 1
	}
	pb["stream"] = false
	delete(pb, "stream_options")
	pb["kv_transfer_params"] = kv
	return json.Marshal(pb)
}

// decodeBody is req with kv.
func decodeBody(req Body, kv any) ([]byte, error) {
	db := req.with(1)
	db["kv_transfer_params"] = kv
	return json.Marshal(db)
}

// errNoSeedParams: a seed-protocol prefill answered without params.
var errNoSeedParams = errors.New("prefill answered without kv_transfer_params")

// SeedDecodeBody is the decode half of ProtocolVLLMSeed: req with the
// kv_transfer_params of prefill's answer, unchanged.
func SeedDecodeBody(req Body, prefillAnswer []byte) ([]byte, error) {
	a, err := decodeObject(prefillAnswer)
	if err != nil {
		return nil, fmt.Errorf("prefill answer: %v", err)
	}
	// Whatever the engine answered is forwarded: its fields are open.
	kv, ok := a["kv_transfer_params"].(map[string]any)
	if !ok || len(kv) == 0 {
		return nil, errNoSeedParams
	}
	return decodeBody(req, kv)
}
