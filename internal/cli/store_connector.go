package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/storeconnector"
	"github.com/kvcache-go/mooncake/internal/storeprom"
	"github.com/kvcache-go/mooncake/internal/tlsconf"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// storeConnectorConfig is --kv-connector-config for the store connector.
type storeConnectorConfig struct {
	Master          string  `json:"master"`            // required: "host:port" or "etcd://..."
	KeyPrefix       string  `json:"key_prefix"`        // "mooncake/kv/"
	Save            bool    `json:"save"`              // true
	Load            bool    `json:"load"`              // true
	Replicas        int     `json:"replicas"`          // the client's default, 1
	LookupTimeoutMS float64 `json:"lookup_timeout_ms"` // 200
	LoadTimeoutS    float64 `json:"load_timeout_s"`    // 10
	SaveTimeoutS    float64 `json:"save_timeout_s"`    // 10
	SaveQueue       int     `json:"save_queue"`        // 64
	LocalBufferMB   int     `json:"local_buffer_mb"`   // the store client's staging buffer (64)
	Transport       string  `json:"transport"`         // transport of the transfer engine (auto)
	Layerwise       bool    `json:"layerwise"`         // load/save layer by layer within the step (false)
	TenantToken     string  `json:"tenant_token"`      // a master with tenants: the token ($MOONCAKE_TENANT_TOKEN)
	TenantID        string  `json:"tenant_id"`         // Mooncake's tenant_id: the tenant named ($MOONCAKE_TENANT_ID; docs/security.md)
	TLSCA           string  `json:"tls_ca"`            // the master over TLS: CA of its certificate
	TLSCert         string  `json:"tls_cert"`          // mutual TLS: client certificate
	TLSKey          string  `json:"tls_key"`           // and its key
	// The store client's hot cache (store.HotCacheConfig), by Mooncake's
	// names; each defaults to its MC_STORE_LOCAL_HOT_* environment variable.
	HotCacheSize      uint64 `json:"local_hot_cache_size"`          // bytes; 0 = off
	HotBlockSize      uint64 `json:"local_hot_block_size"`          // largest value cached (16 MiB)
	HotAdmitThreshold int    `json:"local_hot_admission_threshold"` // reads before a value is cached (2)
}

func parseStoreConnectorConfig(m map[string]any) (storeConnectorConfig, error) {
	c := storeConnectorConfig{Save: true, Load: true}
	hc, err := store.HotCacheFromEnv(os.Getenv)
	if err != nil {
		return c, err
	}
	c.HotCacheSize, c.HotBlockSize, c.HotAdmitThreshold = hc.Size, hc.BlockSize, hc.AdmissionThreshold
	if err := decodeConnectorConfig(m, &c); err != nil {
		return c, err
	}
	if err := c.hotCache().Validate(); err != nil {
		return c, fmt.Errorf("--kv-connector-config: %w", err)
	}
	switch {
	case c.Master == "":
		return c, fmt.Errorf("--kv-connector-config: the store connector needs \"master\": \"host:port\"")
	case c.Replicas < 0 || c.SaveQueue < 0 || c.LocalBufferMB < 0:
		return c, fmt.Errorf("--kv-connector-config: replicas, save_queue and local_buffer_mb must be >= 0")
	case c.LookupTimeoutMS < 0 || c.LoadTimeoutS < 0 || c.SaveTimeoutS < 0:
		return c, fmt.Errorf("--kv-connector-config: lookup_timeout_ms, load_timeout_s and save_timeout_s must be >= 0")
	}
	return c, nil
}

// storeConnector builds the KV-pool connector of `mooncake serve
// --kv-connector store`: a transfer engine, a store client and the
// connector on them.
func storeConnector(cc storeConnectorConfig) cluster.KVConnectorFunc {
	return func(ctx context.Context, host string, log *slog.Logger) (*cluster.KVConnector, error) {
		if host == "" || host == "0.0.0.0" {
			host = "127.0.0.1"
		}
		te, err := transfer.Open(ctx, transfer.Config{LocalHostname: host, Transport: cc.Transport, Logger: log})
		if err != nil {
			return nil, err
		}
		secFlags := clientSecurityFlags{token: cc.TenantToken, tenantID: cc.TenantID, tls: tlsconf.Files{CA: cc.TLSCA, Cert: cc.TLSCert, Key: cc.TLSKey}}
		sec, err := secFlags.resolve()
		if err != nil {
			te.Close()
			return nil, fmt.Errorf("store connector: %w", err)
		}
		cl, err := store.New(ctx, store.Config{Master: cc.Master, Mover: te, LocalBufferSize: uint64(cc.LocalBufferMB) << 20,
			Replicas: cc.Replicas, Token: sec.token, TenantID: sec.tenantID, TLS: sec.tls, Logger: log, HotCache: cc.hotCache()})
		if err != nil {
			te.Close()
			return nil, fmt.Errorf("store connector: %w", err)
		}
		ms := func(f float64, unit time.Duration) time.Duration { return time.Duration(f * float64(unit)) }
		conn, err := storeconnector.New(storeconnector.Config{Store: cl, KeyPrefix: cc.KeyPrefix, NoSave: !cc.Save, NoLoad: !cc.Load,
			Replicas: cc.Replicas, LookupTimeout: ms(cc.LookupTimeoutMS, time.Millisecond),
			LoadTimeout: ms(cc.LoadTimeoutS, time.Second), SaveTimeout: ms(cc.SaveTimeoutS, time.Second),
			SaveQueue: cc.SaveQueue, Layerwise: cc.Layerwise, Logger: log})
		if err != nil {
			cl.Close()
			te.Close()
			return nil, fmt.Errorf("store connector: %w", err)
		}
		log.Info("store connector ready", "master", cc.Master, "save", cc.Save, "load", cc.Load)
		return &cluster.KVConnector{Connector: conn, Collectors: append(conn.Collectors(), storeprom.HotCache(cl, nil)), Run: conn.Run, Close: func() error {
			cl.Close()
			return te.Close()
		}}, nil
	}
}

func (c storeConnectorConfig) hotCache() store.HotCacheConfig {
	return store.HotCacheConfig{Size: c.HotCacheSize, BlockSize: c.HotBlockSize, AdmissionThreshold: c.HotAdmitThreshold}
}
