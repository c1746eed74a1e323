package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/pdconnector"
)

// mooncakeConnectorConfig is --kv-connector-config for the mooncake connector.
type mooncakeConnectorConfig struct {
	BootstrapPort int     `json:"bootstrap_port"`  // 8998 for a producer, none for a consumer; 0 picks a free port
	EngineID      string  `json:"engine_id"`       //
	AbortTimeoutS float64 `json:"abort_timeout_s"` // 480
	PullTimeoutS  float64 `json:"pull_timeout_s"`  // 30
	FailurePolicy string  `json:"failure_policy"`  // what --kv-load-failure-policy is (recompute)
	Transport     string  `json:"transport"`       // transport of the transfer engine (auto)
	RPCPort       int     `json:"rpc_port"`        // rpc_port of the transfer engine (0)
	// Layerwise: a producer streams each layer's KV while the prefill
	// computes (true, default) or pushes whole requests after it (false).
	Layerwise bool `json:"layerwise"`
	// KVGrants: a consumer's transfer engine refuses writes into its KV
	// cache outside the blocks of a pull it asked for (one-shot grants;
	// docs/security.md). Off by default.
	KVGrants bool `json:"kv_grants"`
}

func parseMooncakeConnectorConfig(role string, m map[string]any) (mooncakeConnectorConfig, error) {
	c := mooncakeConnectorConfig{BootstrapPort: bootstrap.DefaultPort, Layerwise: true}
	if role == pdconnector.RoleConsumer {
		c.BootstrapPort = 0 // a consumer serves no pulls; its metrics are on the engine's /metrics
	}
	if err := decodeConnectorConfig(m, &c); err != nil {
		return c, err
	}
	if c.AbortTimeoutS < 0 || c.PullTimeoutS < 0 {
		return c, fmt.Errorf("--kv-connector-config: abort_timeout_s and pull_timeout_s must be >= 0")
	}
	return c, nil
}

// decodeConnectorConfig fills dst (a struct with json tags, defaults already
// set) from the parsed --kv-connector-config object: unknown keys and values
// of the wrong type (a string for a number, 1.5 for an integer) are errors.
func decodeConnectorConfig(m map[string]any, dst any) error {
	if len(m) == 0 {
		return nil
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("--kv-connector-config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("--kv-connector-config: %w", err)
	}
	return nil
}

// setMooncakeConnector makes ic a Mooncake P/D instance (cluster builds
// the connector) configured by --kv-connector-config; bootstrapPort
// (--bootstrap-port, if given) overrides its bootstrap_port.
func setMooncakeConnector(ic *cluster.InstanceConfig, m map[string]any, bootstrapPort *int) error {
	cc, err := parseMooncakeConnectorConfig(ic.Role, m)
	if err != nil {
		return err
	}
	if bootstrapPort != nil {
		cc.BootstrapPort = *bootstrapPort
		if cc.BootstrapPort < 0 || cc.BootstrapPort > 65535 {
			return fmt.Errorf("--bootstrap-port %d: want 0..65535", cc.BootstrapPort)
		}
	}
	if cc.BootstrapPort < 0 || cc.BootstrapPort > 65535 {
		return fmt.Errorf("--kv-connector-config: bootstrap_port %d: want 0..65535", cc.BootstrapPort)
	}
	if cc.FailurePolicy != "" && cc.FailurePolicy != engine.PolicyRecompute && cc.FailurePolicy != engine.PolicyFail {
		return fmt.Errorf("--kv-connector-config: failure_policy %q (want recompute or fail)", cc.FailurePolicy)
	}
	ic.KVConnector = nil // the role's: the P/D connector
	ic.BootstrapPort, ic.EngineID, ic.RPCPort, ic.Transport = cc.BootstrapPort, cc.EngineID, cc.RPCPort, cc.Transport
	ic.AbortTimeout = time.Duration(cc.AbortTimeoutS * float64(time.Second))
	ic.PullTimeout = time.Duration(cc.PullTimeoutS * float64(time.Second))
	ic.PDFailurePolicy = cc.FailurePolicy
	ic.PDWholeRequest = !cc.Layerwise
	ic.PDGrants = cc.KVGrants
	return nil
}
