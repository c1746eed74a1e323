package pdconnector

// The connector's answers, typed, and their one marshal step into the
// engine's kv_transfer_params map (engine.Connector.RequestFinished returns
// the open map the engine's HTTP layer encodes): the published field names,
// with the Go types the engine's JSON encoder and our tests expect.

// answer is a request's response kv_transfer_params, typed; wire is its
// marshal step.
type answer interface{ wire() map[string]any }

var (
	_ answer = prefillAnswer{}
	_ answer = decodeAnswer{}
)

// prefillAnswer is a prefill half's response kv_transfer_params: what each
// contract's proxy forwards to decode. One answer serves them all: ours and
// vLLM's reworked connector read transfer_id, remote_bootstrap_addr and
// remote_engine_id; vLLM's seed connector remote_host and remote_port (the
// bootstrap port) and pairs by request id (transfer_id carries it too);
// SGLang's bootstrap_host and bootstrap_port.
type prefillAnswer struct {
	TransferID, EngineID, BootstrapAddr string
	Host                                string
	Port                                int
	TPSize                              int
	BlockIDs                            []int
	SGLang                              bool
}

// wire is a as kv_transfer_params fields.
func (a prefillAnswer) wire() map[string]any {
	out := map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "transfer_id": a.TransferID,
		"remote_engine_id": a.EngineID, "remote_bootstrap_addr": a.BootstrapAddr,
		"remote_host": a.Host, "remote_port": a.Port, "tp_size": a.TPSize, "remote_block_ids": append([]int{}, a.BlockIDs...)}
	if a.SGLang {
		out["bootstrap_host"], out["bootstrap_port"] = a.Host, a.Port
	}
	return out
}

// decodeAnswer is a decode request's response kv_transfer_params: the
// load and what the engine made of prefill's first token.
type decodeAnswer struct {
	LoadReport
	AuxMatch    *bool // aux_first_token_match: prefill's first token is decode's
	FromPrefill *bool // first_token_from_prefill: decode took it as is
}

// wire is a as kv_transfer_params fields.
func (a decodeAnswer) wire() map[string]any {
	out := a.LoadReport.wire()
	if a.AuxMatch != nil {
		out["aux_first_token_match"] = *a.AuxMatch
	}
	if a.FromPrefill != nil {
		out["first_token_from_prefill"] = *a.FromPrefill
	}
	return out
}

// wire is r as kv_transfer_params fields (the published names; the pull's
// figures only for a remote load).
func (r LoadReport) wire() map[string]any {
	out := map[string]any{"transfer_id": r.TransferID, "kv_load": r.Load}
	if r.Error != "" {
		out["kv_load_error"] = r.Error
	}
	if r.Load != LoadRemote {
		return out
	}
	out["kv_pull_bytes"] = r.Bytes
	out["kv_pull_ms"] = float64(r.Nanos) / 1e6
	out["kv_write_ms"] = float64(r.WriteNanos) / 1e6
	out["kv_write_requests"] = r.WriteReqs
	out["kv_layerwise"] = r.Streamed
	if r.Streamed {
		out["kv_write_tail_ms"] = float64(r.TailNanos) / 1e6
	}
	if r.Aux != nil {
		out["aux_first_token"] = r.Aux.FirstToken
		out["aux_first_logprob"] = float64(r.Aux.FirstLogprob)
	}
	return out
}
