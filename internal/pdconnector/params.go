package pdconnector

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
)

// Contracts: the published shapes of kv_transfer_params this connector
// speaks (docs/pd.md has a table with an example of each).
const (
	// ContractMooncake is ours and vLLM's reworked connector: a transfer_id
	// minted by the proxy, remote_bootstrap_addr and remote_engine_id.
	ContractMooncake = "mooncake"
	// ContractVLLMBootstrap is vLLM's example proxy
	// (mooncake_connector_proxy.py): bootstrap_server_host and
	// bootstrap_server_port, no transfer id; the halves pair by X-Request-Id.
	ContractVLLMBootstrap = "vllm-bootstrap"
	// ContractVLLMSeed is vLLM's first Mooncake connector: prefill returns
	// remote_host and remote_port, the proxy forwards them to decode; the
	// halves pair by X-Request-Id.
	ContractVLLMSeed = "vllm-seed"
	// ContractSGLang is SGLang's: bootstrap_host, bootstrap_port and
	// bootstrap_room in the body of both halves; the halves pair by room.
	ContractSGLang = "sglang"
)

// The parsers below are the JSON edge of the params: the engine hands a
// request's kv_transfer_params over as its open map
// (engine.ReqState.KVTransferParams; any client field may be in it), and
// they read it into RemoteParams or a prefill key. Nothing past them (the
// cores, the halves' logic) sees the map.

// errBadParams wraps every malformed kv_transfer_params.
var errBadParams = errors.New("pdconnector: malformed kv_transfer_params")

// RemoteParams are the decode half's kv_transfer_params, whatever contract
// they came in.
type RemoteParams struct {
	TransferID string // the pairing key: transfer_id, sglang-room-<room>, or the request id
	Bootstrap  string // prefill's bootstrap host:port
	EngineID   string // expected remote engine id ("" = any)
	Contract   string
}

// sglangKey is the transfer id of an SGLang bootstrap room.
func sglangKey(room string) string { return "sglang-room-" + room }

// ParseRemote reads the decode half's params of request reqID; ok is false
// when it is not a remote-prefill request; err reports malformed params.
// Without a transfer_id the halves pair by the request id (X-Request-Id).
func ParseRemote(reqID string, params map[string]any) (rp RemoteParams, ok bool, err error) {
	if v, _ := params["do_remote_prefill"].(bool); !v {
		return rp, false, nil
	}
	rp.TransferID, err = optString(params, "transfer_id")
	if err != nil {
		return rp, true, err
	}
	if rp.EngineID, err = optString(params, "remote_engine_id"); err != nil {
		return rp, true, err
	}
	switch {
	case params["bootstrap_room"] != nil:
		rp.Contract = ContractSGLang
		room, err := roomOf(params["bootstrap_room"])
		if err != nil {
			return rp, true, err
		}
		rp.TransferID = sglangKey(room)
		rp.Bootstrap, err = hostPort(params, "bootstrap_host", "bootstrap_port")
		if err != nil {
			return rp, true, err
		}
	case params["remote_bootstrap_addr"] != nil:
		rp.Contract = ContractMooncake
		a, err := optString(params, "remote_bootstrap_addr")
		if err != nil {
			return rp, true, err
		}
		if rp.Bootstrap, err = normalizeAddr(a); err != nil {
			return rp, true, err
		}
	case params["bootstrap_server_host"] != nil || params["bootstrap_server_port"] != nil:
		rp.Contract = ContractVLLMBootstrap
		if rp.Bootstrap, err = hostPort(params, "bootstrap_server_host", "bootstrap_server_port"); err != nil {
			return rp, true, err
		}
	case params["remote_host"] != nil || params["remote_port"] != nil:
		rp.Contract = ContractVLLMSeed
		if rp.Bootstrap, err = hostPort(params, "remote_host", "remote_port"); err != nil {
			return rp, true, err
		}
	default:
		return rp, true, fmt.Errorf("%w: do_remote_prefill needs the prefill's bootstrap address: remote_bootstrap_addr (with transfer_id), "+
			"bootstrap_server_host and bootstrap_server_port, or remote_host and remote_port (without transfer_id the halves pair by X-Request-Id)", errBadParams)
	}
	if rp.TransferID == "" {
		rp.TransferID = reqID
	}
	if rp.TransferID == "" {
		return rp, true, fmt.Errorf("%w: no transfer_id and no request id to pair the halves by", errBadParams)
	}
	return rp, true, nil
}

// prefillKey is the pairing key of a prefill half (do_remote_decode):
// transfer_id, the SGLang room, or the request id. ok is false when the
// request is not a prefill half.
func prefillKey(reqID string, params map[string]any) (key, contract string, ok bool, err error) {
	if v, _ := params["do_remote_decode"].(bool); !v {
		return "", "", false, nil
	}
	if params["bootstrap_room"] != nil {
		room, err := roomOf(params["bootstrap_room"])
		if err != nil {
			return "", "", true, err
		}
		return sglangKey(room), ContractSGLang, true, nil
	}
	tid, err := optString(params, "transfer_id")
	if err != nil {
		return "", "", true, err
	}
	if tid != "" {
		return tid, ContractMooncake, true, nil
	}
	return reqID, ContractVLLMBootstrap, true, nil
}

// CheckParams reports malformed kv_transfer_params of either half before
// the request is queued (the engine server answers 400 with the error).
func CheckParams(params map[string]any) error {
	if _, _, _, err := prefillKey("x", params); err != nil {
		return err
	}
	_, _, err := ParseRemote("x", params)
	return err
}

// PrepareParams is the engine server's hook (server.Config.PrepareKV) for
// a connector of role: it checks the params and turns SGLang's fields
// (bootstrap_host/port/room, the same on both halves) into this role's
// half. prefillOnly caps an SGLang prefill half at one output token.
func PrepareParams(role string, params map[string]any) (out map[string]any, prefillOnly bool, err error) {
	if params["bootstrap_room"] != nil {
		_, dr := params["do_remote_decode"]
		_, dp := params["do_remote_prefill"]
		if !dr && !dp {
			out = make(map[string]any, len(params)+1)
			for k, v := range params {
				out[k] = v
			}
			switch role {
			case RoleProducer:
				out["do_remote_decode"] = true
				prefillOnly = true
			case RoleConsumer:
				out["do_remote_prefill"] = true
			default:
				return nil, false, fmt.Errorf("%w: bootstrap_room on an engine of role %q: SGLang's contract needs a producer or a consumer", errBadParams, role)
			}
			params = out
		}
	}
	if err := CheckParams(params); err != nil {
		return nil, false, err
	}
	return params, prefillOnly, nil
}

func optString(params map[string]any, key string) (string, error) {
	v, ok := params[key]
	if !ok || v == nil {
		return "", nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", fmt.Errorf("%w: %s must be a string, got %T", errBadParams, key, v)
	}
	return s, nil
}

// hostPort joins params[hk] and params[pk] (a number or a numeric string).
func hostPort(params map[string]any, hk, pk string) (string, error) {
	host, err := optString(params, hk)
	if err != nil {
		return "", err
	}
	host = strings.Trim(host, "[]")
	if host == "" {
		return "", fmt.Errorf("%w: %s is required with %s", errBadParams, hk, pk)
	}
	port, err := portOf(params[pk])
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", errBadParams, pk, err)
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

func portOf(v any) (int, error) {
	var n float64
	switch x := v.(type) {
	case float64:
		n = x
	case int:
		n = float64(x)
	case int64:
		n = float64(x)
	case string:
		p, err := strconv.Atoi(x)
		if err != nil {
			return 0, fmt.Errorf("port %q is not a number", x)
		}
		n = float64(p)
	case nil:
		return 0, errors.New("missing (vLLM's example proxy sends 8998 by default)")
	default:
		return 0, fmt.Errorf("port must be a number, got %T", v)
	}
	if n != math.Trunc(n) || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %v out of range", v)
	}
	return int(n), nil
}

// roomOf reads a bootstrap room: a non-negative integer, as a number or
// a decimal string (the engine server passes it on as a string, exactly).
func roomOf(v any) (string, error) {
	switch x := v.(type) {
	case string:
		if _, err := strconv.ParseUint(x, 10, 64); err != nil {
			return "", fmt.Errorf("%w: bootstrap_room %q is not a non-negative integer", errBadParams, x)
		}
		return x, nil
	case float64:
		if x != math.Trunc(x) || x < 0 || x >= 1<<63 {
			return "", fmt.Errorf("%w: bootstrap_room %v is not a non-negative integer", errBadParams, x)
		}
		return strconv.FormatUint(uint64(x), 10), nil
	}
	return "", fmt.Errorf("%w: bootstrap_room must be an integer, got %T", errBadParams, v)
}

// normalizeAddr accepts host:port or an http(s) URL (vLLM's reworked
// connector returns "http://host:8998").
func normalizeAddr(a string) (string, error) {
	a = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(a, "http://"), "https://"), "/")
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", fmt.Errorf("%w: remote_bootstrap_addr %q is not host:port: %v", errBadParams, a, err)
	}
	return a, nil
}
