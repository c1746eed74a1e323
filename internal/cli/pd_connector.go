package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/pdconnector"
	"github.com/kvcache-go/mooncake/transfer"
)

// The Mooncake P/D connector for `mooncake serve --kv-connector mooncake`.
func init() { kvConnectors["mooncake"] = newMooncakeConnector }

// mooncakeConnectorConfig is --kv-connector-config for the mooncake connector.
type mooncakeConnectorConfig struct {
	BootstrapPort int     `json:"bootstrap_port"`  // 8998 for a producer, none for a consumer; 0 picks a free port
	EngineID      string  `json:"engine_id"`       //
	AbortTimeoutS float64 `json:"abort_timeout_s"` // 480
	PullTimeoutS  float64 `json:"pull_timeout_s"`  // 30
	FailurePolicy string  `json:"failure_policy"`  // what --kv-load-failure-policy is (recompute)
	Transport     string  `json:"transport"`       // transport of the transfer engine (auto)
	RPCPort       int     `json:"rpc_port"`        // rpc_port of the transfer engine (0)
}

func parseMooncakeConnectorConfig(role string, m map[string]any) (mooncakeConnectorConfig, error) {
	c := mooncakeConnectorConfig{BootstrapPort: bootstrap.DefaultPort}
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

func newMooncakeConnector(ctx context.Context, opts KVConnectorOptions) (*KVConnectorSetup, error) {
	cc, err := parseMooncakeConnectorConfig(opts.Role, opts.Config)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	if opts.BootstrapPort != nil {
		cc.BootstrapPort = *opts.BootstrapPort
		if cc.BootstrapPort < 0 || cc.BootstrapPort > 65535 {
			return nil, &ExitError{Code: 2, Err: fmt.Errorf("--bootstrap-port %d: want 0..65535", cc.BootstrapPort)}
		}
	}
	host := opts.Host
	if host == "" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	te, err := transfer.Open(ctx, transfer.Config{LocalHostname: host, RPCPort: cc.RPCPort, Transport: cc.Transport, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	conn, err := pdconnector.New(pdconnector.Config{Role: opts.Role, Transfer: te, EngineID: cc.EngineID,
		BootstrapHost: host, BootstrapPort: cc.BootstrapPort,
		AbortTimeout:  time.Duration(cc.AbortTimeoutS * float64(time.Second)),
		PullTimeout:   time.Duration(cc.PullTimeoutS * float64(time.Second)),
		FailurePolicy: cc.FailurePolicy, Logger: opts.Logger})
	if err != nil {
		te.Close()
		return nil, &ExitError{Code: 2, Err: err}
	}
	if opts.Logger != nil {
		opts.Logger.Info("mooncake connector ready", "role", opts.Role, "engine_id", conn.EngineID(),
			"bootstrap", conn.BootstrapAddr(), "transfer_segment", te.Name())
	}
	return &KVConnectorSetup{Connector: conn, Allocator: conn.Allocator(), Collectors: conn.Collectors(),
		Close: func() error {
			conn.Close()
			return te.Close()
		}}, nil
}
