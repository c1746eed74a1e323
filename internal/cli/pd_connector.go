package cli

import (
	"context"
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
	BootstrapPort int     // bootstrap_port (8998 for a producer, none for a consumer; 0 picks a free port)
	EngineID      string  // engine_id
	AbortTimeoutS float64 // abort_timeout_s (480)
	PullTimeoutS  float64 // pull_timeout_s (30)
	FailurePolicy string  // failure_policy: what --kv-load-failure-policy is (recompute)
	Transport     string  // transport of the transfer engine (auto)
	RPCPort       int     // rpc_port of the transfer engine (0)
}

func parseMooncakeConnectorConfig(role string, m map[string]any) (mooncakeConnectorConfig, error) {
	c := mooncakeConnectorConfig{BootstrapPort: bootstrap.DefaultPort}
	if role == pdconnector.RoleConsumer {
		c.BootstrapPort = 0 // a consumer serves no pulls; its metrics are on the engine's /metrics
	}
	for k, v := range m {
		var err error
		switch k {
		case "bootstrap_port":
			c.BootstrapPort, err = intValue(k, v)
		case "rpc_port":
			c.RPCPort, err = intValue(k, v)
		case "abort_timeout_s":
			c.AbortTimeoutS, err = floatValue(k, v)
		case "pull_timeout_s":
			c.PullTimeoutS, err = floatValue(k, v)
		case "engine_id", "failure_policy", "transport":
			s, ok := v.(string)
			if !ok {
				err = fmt.Errorf("--kv-connector-config: %s must be a string", k)
			}
			switch k {
			case "engine_id":
				c.EngineID = s
			case "failure_policy":
				c.FailurePolicy = s
			default:
				c.Transport = s
			}
		default:
			err = fmt.Errorf("--kv-connector-config: unknown key %q (bootstrap_port, engine_id, abort_timeout_s, pull_timeout_s, failure_policy, transport, rpc_port)", k)
		}
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

func intValue(k string, v any) (int, error) {
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) {
		return 0, fmt.Errorf("--kv-connector-config: %s must be an integer", k)
	}
	return int(f), nil
}

func floatValue(k string, v any) (float64, error) {
	f, ok := v.(float64)
	if !ok || f < 0 {
		return 0, fmt.Errorf("--kv-connector-config: %s must be a non-negative number", k)
	}
	return f, nil
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
