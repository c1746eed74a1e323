package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/leader"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/metadata"
)

// masterGflags are the rest of mooncake_master's gflags (Mooncake's
// mooncake-store/src/master.cpp) on `mooncake master`, beside the lease
// and liveness ones of registerMooncakeMasterFlags: the ones with a
// counterpart here set it, the embedded HTTP metadata server runs in the
// master's process, and the others are accepted and named in a warning at
// start, so that Mooncake's command lines (--flag=value, --flag value,
// booleans --flag or --flag=true) run unchanged. All are hidden from --help;
// docs/store.md lists them.
type masterGflags struct {
	metaEnable bool
	metaPort   int
	metaHost   string

	kvEvents     bool
	kvEventsBind string
	kvStd        kvevents.StandardConfig // Mooncake's event form (--enable_kv_events)
	haBackend    string
	verbosity    int

	// Mooncake's tenant quota policy: --enable_multi_tenants with
	// --tenant_quota_connector_type file|etcd and
	// --tenant_quota_connector_uri (a file, or etcd endpoints: the policy
	// is then the key mooncake-store/<cluster_id>/tenant_quota_policy).
	multiTenants  bool
	quotaConnType string
	quotaConnURI  string
	cluster       *string

	ignored map[string]string // flag -> why it has no effect here
	set     *pflag.FlagSet
}

// portIfSet is Mooncake's --rpc_port: 0 (its default) means "use --port".
type portIfSet struct{ p *int }

func (v portIfSet) String() string { return "0" }
func (v portIfSet) Type() string   { return "int" }
func (v portIfSet) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: want a port number", s)
	}
	if n != 0 {
		*v.p = n
	}
	return nil
}

// Mooncake's master flags that have no counterpart here, by kind of value
// (booleans must take a bare --flag), with the reason given in the warning.
var (
	gflagNoEffect = map[string]string{
		"max_threads":                                 "the master's RPC serving is not thread-pooled here",
		"rpc_thread_num":                              "the master's RPC serving is not thread-pooled here",
		"rpc_interface":                               "the master listens on --rpc_address",
		"rpc_conn_timeout_seconds":                    "",
		"metrics_host":                                "the admin HTTP server listens on the RPC address",
		"config_path":                                 "configure with flags",
		"memory_allocator":                            "segments use this project's offset allocator",
		"nof_eviction_ratio":                          "no NVMe-oF tier here",
		"nof_eviction_high_watermark_ratio":           "no NVMe-oF tier here",
		"nof_heartbeat_interval_sec":                  "no NVMe-oF tier here",
		"nof_heartbeat_probe_timeout_ms":              "no NVMe-oF tier here",
		"nof_heartbeat_failures_threshold":            "no NVMe-oF tier here",
		"offloading_queue_limit":                      "the disk tier belongs to the storage node (mooncake store --enable-offload)",
		"offload_cap_ratio":                           "the disk tier belongs to the storage node (mooncake store --enable-offload)",
		"promotion_admission_threshold":               "the disk tier belongs to the storage node (mooncake store --promotion-on-hit)",
		"promotion_queue_limit":                       "the disk tier belongs to the storage node",
		"promotion_max_per_heartbeat":                 "the disk tier belongs to the storage node",
		"root_fs_dir":                                 "the disk tier belongs to the storage node (mooncake store --root-fs-dir DIR --enable-offload)",
		"global_file_segment_size":                    "the disk tier belongs to the storage node (mooncake store --disk-capacity)",
		"quota_bytes":                                 "the disk tier belongs to the storage node (mooncake store --disk-capacity)",
		"dynamic_replication_mode":                    "no dynamic replication here",
		"dynamic_replication_heat_window_seconds":     "no dynamic replication here",
		"dynamic_replication_admission_qps_threshold": "no dynamic replication here",
		"dynamic_replication_max_memory_replicas":     "no dynamic replication here",
		"kv_events_model_name":                        "published as nil, as by Mooncake's master (an indexer's registration supplies it)",
		"kv_events_additional_salt":                   "published as nil, as by Mooncake's master (an indexer's registration supplies it)",
		"kv_events_lora_name":                         "published as nil, as by Mooncake's master (an indexer's registration supplies it)",
		"kv_events_block_size":                        "published as nil, as by Mooncake's master (an indexer's registration supplies it)",
		"kv_events_dp_rank":                           "published as nil, as by Mooncake's master (an indexer's registration supplies it)",
		"kv_events_queue_capacity":                    "",
		"oplog_poll_interval_ms":                      "no operation log here: objects survive restarts through --durable-metadata",
		"oplog_batch_max_entries":                     "no operation log here",
		"batch_oplog_retry_timeout_sec":               "no operation log here",
		"pod_name":                                    "",
		"pod_namespace":                               "",
		"snapshot_backup_dir":                         "no snapshots here: objects survive restarts through --durable-metadata",
		"snapshot_interval_seconds":                   "no snapshots here",
		"snapshot_child_timeout_seconds":              "no snapshots here",
		"snapshot_retention_count":                    "no snapshots here",
		"snapshot_object_store_type":                  "no snapshots here",
		"snapshot_payload_store_type":                 "no snapshots here",
		"snapshot_payload_backend_type":               "no snapshots here",
		"snapshot_catalog_store_type":                 "no snapshots here",
		"snapshot_catalog_backend_type":               "no snapshots here",
		"snapshot_catalog_store_connstring":           "no snapshots here",
		"snapshot_catalog_backend_connstring":         "no snapshots here",
		"max_total_finished_tasks":                    "",
		"max_total_pending_tasks":                     "",
		"max_total_processing_tasks":                  "",
		"pending_task_timeout_sec":                    "",
		"processing_task_timeout_sec":                 "",
		"max_retry_attempts":                          "",
		"cxl_path":                                    "no CXL memory here",
		"cxl_size":                                    "no CXL memory here",
	}
	gflagNoEffectBool = map[string]string{
		"enable_metric_reporting":            "metrics are always served on /metrics",
		"rpc_enable_tcp_no_delay":            "",
		"allow_evict_soft_pinned_objects":    "soft-pinned objects are evicted after unpinned ones when nothing else frees space",
		"enable_offload":                     "the disk tier belongs to the storage node (mooncake store --root-fs-dir DIR --enable-offload)",
		"offload_on_evict":                   "the disk tier belongs to the storage node (mooncake store --offload-on-evict)",
		"offload_force_evict":                "the disk tier belongs to the storage node",
		"promotion_on_hit":                   "the disk tier belongs to the storage node (mooncake store --promotion-on-hit)",
		"enable_disk_eviction":               "the disk tier belongs to the storage node (--disk-capacity)",
		"enable_oplog":                       "no operation log here: objects survive restarts through --durable-metadata",
		"enable_snapshot":                    "no snapshots here: objects survive restarts through --durable-metadata",
		"enable_snapshot_restore":            "no snapshots here: objects survive restarts through --durable-metadata",
		"enable_metadata_cleanup_on_timeout": "",
		"enable_cxl":                         "no CXL memory here",
	}
)

// register adds the flags; host, port, httpPort and strategy are the
// master command's own.
func (g *masterGflags) register(f *pflag.FlagSet, host *string, port, httpPort *int, strategy *string, core *master.Config, ha *haFlags) {
	g.set = f
	var names []string
	add := func(name string) { names = append(names, name) }
	f.Var(portIfSet{port}, "rpc_port", "Mooncake's --rpc_port (0: --port)")
	add("rpc_port")
	f.StringVar(host, "rpc_address", *host, "Mooncake's name of --host")
	add("rpc_address")
	f.IntVar(httpPort, "metrics_port", *httpPort, "Mooncake's name of --http-port")
	add("metrics_port")
	f.StringVar(strategy, "allocation_strategy", *strategy, "Mooncake's name of --strategy")
	add("allocation_strategy")
	f.Var(unitDuration{&core.SoftPinTTL, time.Millisecond}, "default_kv_soft_pin_ttl", "default soft pin TTL: milliseconds or a duration")
	add("default_kv_soft_pin_ttl")
	f.Var(unitDuration{&core.MaxSoftPinTTL, time.Millisecond}, "max_kv_soft_pin_ttl", "largest soft pin TTL: milliseconds or a duration")
	add("max_kv_soft_pin_ttl")
	f.Var(unitDuration{&core.PutTimeout, time.Second}, "put_start_discard_timeout_sec", "Mooncake's name of --put-timeout, in seconds")
	add("put_start_discard_timeout_sec")
	f.Var(unitDuration{&core.PutReleaseTimeout, time.Second}, "put_start_release_timeout_sec", "Mooncake's name of --put-release-timeout, in seconds")
	add("put_start_release_timeout_sec")
	f.BoolVar(&ha.enabled, "enable_ha", ha.enabled, "Mooncake's name of --ha")
	add("enable_ha")
	f.StringVar(&ha.etcd, "etcd_endpoints", ha.etcd, "Mooncake's name of --etcd")
	add("etcd_endpoints")
	f.StringVar(&ha.etcd, "ha_backend_connstring", ha.etcd, "Mooncake's HA backend address (etcd endpoints)")
	add("ha_backend_connstring")
	f.StringVar(&g.haBackend, "ha_backend_type", "etcd", "Mooncake's HA backend: etcd (the only one here)")
	add("ha_backend_type")
	f.StringVar(&ha.cluster, "cluster_id", ha.cluster, "Mooncake's name of --cluster")
	add("cluster_id")
	g.cluster = &ha.cluster
	f.BoolVar(&g.multiTenants, "enable_multi_tenants", false, "Mooncake's tenant mode: the tenant policy of --tenant_quota_connector_type/_uri (as --tenants)")
	add("enable_multi_tenants")
	f.StringVar(&g.quotaConnType, "tenant_quota_connector_type", "file", "where --enable_multi_tenants reads the tenant policy: file or etcd")
	add("tenant_quota_connector_type")
	f.StringVar(&g.quotaConnURI, "tenant_quota_connector_uri", "", "the policy file, or the etcd endpoints HOST:PORT[;HOST:PORT] (key mooncake-store/<cluster_id>/tenant_quota_policy; absent: no tenants yet)")
	add("tenant_quota_connector_uri")
	f.BoolVar(&g.metaEnable, "enable_http_metadata_server", false, "run Mooncake's HTTP metadata server (GET/PUT/DELETE /metadata, GET /health) in the master's process")
	add("enable_http_metadata_server")
	f.IntVar(&g.metaPort, "http_metadata_server_port", 8080, "port of the embedded HTTP metadata server")
	add("http_metadata_server_port")
	f.StringVar(&g.metaHost, "http_metadata_server_host", "0.0.0.0", "address of the embedded HTTP metadata server")
	add("http_metadata_server_host")
	f.BoolVar(&g.kvEvents, "enable_kv_events", false, "publish KV events on --kv_events_bind_endpoint (Mooncake's names of --kv-events-endpoint)")
	add("enable_kv_events")
	f.StringVar(&g.kvEventsBind, "kv_events_bind_endpoint", "", "ZMQ PUB endpoint of the KV events")
	add("kv_events_bind_endpoint")
	f.StringVar(&g.kvStd.BackendID, "kv_events_backend_id", "", "backend_id of every KV event (the cache's owner, as an indexer knows it; default: --cluster_id)")
	add("kv_events_backend_id")
	f.StringVar(&g.kvStd.TenantID, "kv_events_tenant_id", "default", "tenant_id of the raw key space's events (a tenant's keys carry their tenant)")
	add("kv_events_tenant_id")
	f.BoolVar(&g.kvStd.Legacy, "kv_events_emit_legacy_compat", true, "also write type, block_hashes and parent_block_hash in each event")
	add("kv_events_emit_legacy_compat")
	f.BoolVar(&g.kvStd.ObjectKey, "kv_events_emit_object_key", true, "write object_key, and publish keys that are not a decimal or 0x-hex hash (with empty seq_hashes)")
	add("kv_events_emit_object_key")
	f.IntVar(&g.verbosity, "v", 0, "glog verbosity: above 0 is --verbose")
	add("v")
	for name := range gflagNoEffect {
		f.String(name, "", "Mooncake master flag with no effect here")
		add(name)
	}
	for name := range gflagNoEffectBool {
		f.Bool(name, false, "Mooncake master flag with no effect here")
		add(name)
	}
	for _, n := range names {
		_ = f.MarkHidden(n)
	}
}

// apply checks and completes the settings after parsing and writes a
// warning to warn for each accepted flag without effect.
func (g *masterGflags) apply(warn io.Writer, verbose *bool, events *masterEventFlags, sec *masterSecurityFlags) error {
	if g.set == nil {
		return nil
	}
	if err := g.applyTenants(warn, sec); err != nil {
		return err
	}
	if b := strings.ToLower(strings.TrimSpace(g.haBackend)); b != "" && b != "etcd" {
		return &ExitError{Code: 2, Err: fmt.Errorf("--ha_backend_type %q: only etcd is supported here", g.haBackend)}
	}
	if g.verbosity > 0 {
		*verbose = true
	}
	if g.kvEvents && events.endpoint == "" {
		if g.kvEventsBind == "" {
			return &ExitError{Code: 2, Err: fmt.Errorf("--enable_kv_events needs --kv_events_bind_endpoint tcp://HOST:PORT")}
		}
		events.endpoint = g.kvEventsBind
		std := g.kvStd
		if std.BackendID == "" {
			std.BackendID = *g.cluster
		}
		events.standard = &std
	}
	var ignored []string
	g.set.Visit(func(fl *pflag.Flag) {
		why, ok := gflagNoEffect[fl.Name]
		if !ok {
			why, ok = gflagNoEffectBool[fl.Name]
		}
		if !ok {
			return
		}
		if why == "" {
			why = "no counterpart here"
		}
		ignored = append(ignored, fmt.Sprintf("mooncake master: warning: --%s=%s accepted and ignored: %s", fl.Name, fl.Value.String(), why))
	})
	sort.Strings(ignored)
	for _, l := range ignored {
		fmt.Fprintln(warn, l)
	}
	if g.metaEnable && (g.metaPort < 0 || g.metaPort > 65535) {
		return &ExitError{Code: 2, Err: fmt.Errorf("--http_metadata_server_port %d out of range", g.metaPort)}
	}
	return nil
}

// applyTenants turns Mooncake's --enable_multi_tenants and its connector
// flags into --tenants (which wins when given too). Without
// --enable_multi_tenants the connector flags do nothing, as in Mooncake.
func (g *masterGflags) applyTenants(warn io.Writer, sec *masterSecurityFlags) error {
	connSet := g.set.Changed("tenant_quota_connector_type") || g.set.Changed("tenant_quota_connector_uri")
	switch {
	case !g.multiTenants:
		if connSet {
			fmt.Fprintln(warn, "mooncake master: warning: --tenant_quota_connector_* ignored without --enable_multi_tenants")
		}
		return nil
	case sec.tenants != "":
		if connSet {
			fmt.Fprintln(warn, "mooncake master: warning: --tenants given: --tenant_quota_connector_* ignored")
		}
		return nil
	case strings.TrimSpace(g.quotaConnURI) == "":
		return &ExitError{Code: 2, Err: fmt.Errorf("--enable_multi_tenants: the %s connector needs --tenant_quota_connector_uri", g.quotaConnType)}
	}
	switch strings.ToLower(strings.TrimSpace(g.quotaConnType)) {
	case "file":
		sec.tenants = g.quotaConnURI
	case "etcd":
		cluster := strings.TrimRight(strings.TrimSpace(*g.cluster), "/")
		if cluster == "" {
			cluster = leader.DefaultCluster
		}
		if strings.Contains(cluster, "/") {
			return &ExitError{Code: 2, Err: fmt.Errorf("--cluster_id %q: no '/' inside a cluster id", cluster)}
		}
		sec.tenants = "etcd://" + strings.TrimSpace(g.quotaConnURI) + "/mooncake-store/" + cluster + "/tenant_quota_policy"
		sec.absentEmpty = true
	default:
		return &ExitError{Code: 2, Err: fmt.Errorf("--tenant_quota_connector_type %q: want file or etcd", g.quotaConnType)}
	}
	return nil
}

// startMetadata starts the embedded HTTP metadata server when
// --enable_http_metadata_server asks for it; it serves until ctx ends. It
// returns a suffix for the master's listening line and a stop function that
// waits for the server.
func (g *masterGflags) startMetadata(ctx context.Context, log *slog.Logger) (string, func(), error) {
	if !g.metaEnable {
		return "", func() {}, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(g.metaHost, strconv.Itoa(g.metaPort)))
	if err != nil {
		return "", nil, fmt.Errorf("master: http metadata server: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := metadata.NewServer(log).Serve(ctx, ln); err != nil {
			log.Error("http metadata server stopped", "err", err)
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = g.metaHost // 0.0.0.0 as given, not [::]
	}
	return " metadata=http://" + net.JoinHostPort(host, strconv.Itoa(addr.Port)) + "/metadata", func() { cancel(); <-done }, nil
}
