package cli

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvcache-go/mooncake/internal/master"
)

// unitDuration is a duration flag that also takes a bare number in a unit,
// as Mooncake's master flags do: --client_ttl 30 is 30 seconds,
// --default_kv_lease_ttl 5000 is 5,000 milliseconds; "30s", "5m" work too.
type unitDuration struct {
	d    *time.Duration
	unit time.Duration
}

func (u unitDuration) String() string {
	if u.d == nil {
		return ""
	}
	return u.d.String()
}

func (u unitDuration) Set(s string) error {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return fmt.Errorf("%d: want a positive number", n)
		}
		*u.d = time.Duration(n) * u.unit
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: want a number of %v or a duration such as 30s", s, u.unit)
	}
	if d <= 0 {
		return fmt.Errorf("%q: want a positive duration", s)
	}
	*u.d = d
	return nil
}

func (u unitDuration) Type() string { return "duration" }

// registerMooncakeMasterFlags adds Mooncake's spellings of the master's
// liveness and lease flags (mooncake_master's gflags and its config keys)
// as synonyms of ours, so that existing command lines run unchanged.
func registerMooncakeMasterFlags(f *pflag.FlagSet, core *master.Config) {
	f.Var(unitDuration{&core.ClientTTL, time.Second}, "client_ttl", "Mooncake's name of --client-ttl: seconds (or a duration) a client stays alive after its last ping")
	f.Var(unitDuration{&core.ClientTTL, time.Second}, "client_live_ttl_sec", "Mooncake's config key of --client-ttl, in seconds")
	f.Var(unitDuration{&core.LeaseTTL, time.Millisecond}, "default_kv_lease_ttl", "Mooncake's name of --lease-ttl: milliseconds (or a duration)")
	f.Float64Var(&core.HighWatermark, "eviction_high_watermark_ratio", core.HighWatermark, "Mooncake's name of --eviction-high-watermark")
	f.Float64Var(&core.EvictionRatio, "eviction_ratio", core.EvictionRatio, "Mooncake's name of --eviction-ratio")
	f.Var(tenantWatermark{&core.TenantHighWatermark}, "tenant-eviction-high-watermark", "with tenant quotas: evict a tenant's own objects when its charged bytes pass this ratio of its byte quota, down to this minus --eviction-ratio (0 = off; default 0.9)")
	f.Var(tenantWatermark{&core.TenantHighWatermark}, "tenant_eviction_high_watermark_ratio", "Mooncake's name of --tenant-eviction-high-watermark")
	for _, n := range []string{"client_ttl", "client_live_ttl_sec", "default_kv_lease_ttl", "eviction_high_watermark_ratio", "eviction_ratio", "tenant_eviction_high_watermark_ratio"} {
		_ = f.MarkHidden(n)
	}
}

// tenantWatermark is --tenant-eviction-high-watermark: a ratio in [0, 1],
// 0 turning the tenant watermark off (master.Config's negative value).
type tenantWatermark struct{ v *float64 }

func (w tenantWatermark) String() string {
	if w.v == nil || *w.v == 0 {
		return "0.9"
	}
	return strconv.FormatFloat(max(*w.v, 0), 'g', -1, 64)
}
func (w tenantWatermark) Type() string { return "ratio" }
func (w tenantWatermark) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 0 || f > 1 {
		return fmt.Errorf("%q: want a ratio from 0 (off) to 1", s)
	}
	if f == 0 {
		f = -1
	}
	*w.v = f
	return nil
}

// maxMemoryFlag is --max-memory: a size, "auto" (the cgroup's memory limit
// when the master runs under one, else none) or 0 (none).
type maxMemoryFlag struct{ v string }

func (m *maxMemoryFlag) register(f *pflag.FlagSet) {
	f.StringVar(&m.v, "max-memory", "auto", "memory the master may use (e.g. 8GiB): above 80% of it new objects are refused with NO_AVAILABLE_HANDLE and the Go GC works to stay under it; auto = the cgroup's memory limit, 0 = no limit")
}

// apply sets the admission limit and the Go runtime's soft memory limit.
func (m *maxMemoryFlag) apply(core *master.Config) error {
	limit, err := m.limit(cgroupMemoryLimit)
	if err != nil {
		return err
	}
	core.Memory.Max = limit
	if limit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(int64(limit))
	}
	return nil
}

func (m *maxMemoryFlag) limit(cgroup func() uint64) (uint64, error) {
	switch v := strings.TrimSpace(m.v); strings.ToLower(v) {
	case "auto", "":
		return cgroup(), nil
	case "0", "none":
		return 0, nil
	default:
		n, err := parseSize(v)
		if err != nil {
			return 0, fmt.Errorf("--max-memory: %w", err)
		}
		return n, nil
	}
}

// cgroupMemoryLimit is the memory limit of this process's cgroup (v2
// memory.max, else v1 memory.limit_in_bytes), 0 when there is none.
func cgroupMemoryLimit() uint64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		return parseCgroupLimit(string(b))
	}
	return 0
}

// parseCgroupLimit reads a cgroup memory limit file: "max" or a number so
// large it means none (v1 writes a page-rounded 2^63) is no limit.
func parseCgroupLimit(s string) uint64 {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n >= 1<<62 {
		return 0
	}
	return n
}
