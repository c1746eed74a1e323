package cli

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/bench/benchproc"
	benchmaster "github.com/kvcache-go/mooncake/internal/bench/master"
	"github.com/kvcache-go/mooncake/internal/etcdtest"
)

// TestBenchMasterSmall runs `mooncake bench master` with every phase at
// 2k objects (failover, which needs --ha, aside: TestBenchMasterFailover) against the real binary's processes and checks the figures:
// every object stored, listed, present and back after the restart, the
// removals counted exactly, the master's memory per object measured, and
// Redis measured next to it when redis-server is installed (always under
// CI, where scripts/deps.sh installs it). The objects are hard-pinned
// (--pin) so that no eviction under the 4 KiB upsert load can make the
// counts below depend on timing.
func TestBenchMasterSmall(t *testing.T) {
	bin := buildBinary(t)
	const n = 2000
	var out strings.Builder
	code, err := Run(t.Context(), []string{"bench", "master", "--binary", bin, "--objects", "2000", "--clients", "4",
		"--duration", "200ms", "--baseline", "1000", "--workers", "2", "--worker-clients", "4", "--probes", "2",
		"--restore-timeout", "30s", "--phase-timeout", "60s", "--pin", "--json", "--quiet"}, &out, io.Discard)
	if code != 0 {
		t.Fatalf("bench master: exit %d: %v\n%s", code, err, out.String())
	}
	var r benchmaster.Result
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(r.Failures) > 0 {
		t.Fatalf("failures: %v", r.Failures)
	}
	if !r.Pinned || len(r.After) != len(benchmaster.AllPhases)-1 || r.Failover != nil || r.After[0].Phase != "load" || r.After[0].Objects != n || r.After[0].Segments != 1 {
		t.Fatalf("pinned %v, master after each phase %+v", r.Pinned, r.After)
	}
	if r.ObjectBytes != 128 {
		t.Errorf("object bytes %d, want 128 (64 B header + 64 B value)", r.ObjectBytes)
	}
	l := r.Load
	// The master's RSS is read before and after the load; at 2,000 objects
	// their difference is within the runtime's own swings (a collection
	// may return more than the objects take), so only the readings are
	// checked here, not the sign of the per-object figure.
	if l == nil || l.Puts != n || l.Errors != 0 || !(l.PutsPerSec > 0) || l.RSSBefore == 0 || l.RSSAfter == 0 {
		t.Fatalf("load %+v", l)
	}
	if r.Baseline == nil || r.BaseN != 1000 || !(r.Baseline.OpsPerSec > 0) {
		t.Fatalf("baseline %+v at %d", r.Baseline, r.BaseN)
	}
	if o := r.Ops; o == nil || !(o.Mooncake.OpsPerSec > 0) || o.Mooncake.Errors != 0 || o.Mooncake.GetP99 <= 0 || o.Mooncake.PutP99 <= 0 {
		t.Fatalf("ops %+v", o)
	}
	b := r.Bulk
	if b == nil || b.Listings < 1 || b.Lost != 0 || b.Present != n || b.NodesDropped != 0 || b.Segments != 1 || b.Polls < 1 || b.PollErrors != 0 {
		t.Fatalf("bulk %+v", b)
	}
	for _, c := range b.Counted {
		if c != n {
			t.Fatalf("a listing counted %d keys, want %d", c, n)
		}
	}
	if rm := r.Remove; rm == nil || rm.Removed != n/2 || rm.Want != n/2 || rm.ListLeft != n/2 {
		t.Fatalf("remove %+v", rm)
	}
	if rs := r.Restart; rs == nil || !rs.Recovered || rs.Present != n/2 || rs.RemovedBack != 0 || rs.RemovedTested != n/2 || rs.Took <= 0 {
		t.Fatalf("restart %+v", rs)
	}
	// The breakdown: in order, and the node's and the master's log lines of
	// the remount read (the node's scan time and report count in them).
	atLeast := func(line, field string, min int) bool {
		v, err := strconv.Atoi(benchproc.Field(line, field))
		return err == nil && v >= min
	}
	if rs := r.Restart; rs.Up <= 0 || rs.Mounted < rs.Up || rs.Took < rs.Mounted || len(rs.NodeRemounts) != 1 ||
		benchproc.Field(rs.NodeRemounts[0], "scan") == "" || !atLeast(rs.NodeRemounts[0], "held", n/2) ||
		!atLeast(rs.MasterRestore, "reports", n/2) {
		t.Fatalf("restart breakdown: up %v, mounted %v, counted %v, took %v; node %q; master %q", rs.Up, rs.Mounted, rs.Counted, rs.Took,
			rs.NodeRemounts, rs.MasterRestore)
	}
	if ra := r.RemoveAll; ra == nil || ra.Removed < n/2 || ra.ListLeft != 0 || ra.NodesDropped != 0 || ra.Segments != 1 {
		t.Fatalf("removeall %+v", ra)
	}
	c := r.ManyCl
	if c == nil || c.Load.Clients != 8 || !(c.Load.OpsPerSec > 0) || c.Load.Errors != 0 || len(c.FirstOp) != 2 || c.FirstOpMedian <= 0 {
		t.Fatalf("clients %+v", c)
	}

	_, errRedis := exec.LookPath("redis-server")
	if errRedis != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found (CI is set): scripts/deps.sh installs it")
		}
		if r.RedisSkipped == "" {
			t.Fatal("redis-server absent but Redis not reported skipped")
		}
		t.Log("redis-server not installed: Redis figures not checked")
		return
	}
	if r.RedisSkipped != "" {
		t.Fatalf("redis skipped: %s", r.RedisSkipped)
	}
	if l.Redis == nil || !(l.Redis.BytesPerKey > 0) || !(l.Redis.SetsPerSec > 0) {
		t.Fatalf("redis load %+v", l.Redis)
	}
	if r.Ops.Redis == nil || !(r.Ops.Redis.OpsPerSec > 0) || r.Ops.Redis.Errors != 0 {
		t.Fatalf("redis ops %+v", r.Ops.Redis)
	}
	if b.Redis == nil || b.Redis.Counted != n {
		t.Fatalf("redis scan %+v, want %d keys", b.Redis, n)
	}
	if r.RemoveAll.Redis == nil || c.Redis == nil || c.Redis.Clients != 8 {
		t.Fatalf("redis removeall %+v, clients %+v", r.RemoveAll.Redis, c.Redis)
	}
}

// TestBenchMasterFlags checks that bad settings exit 2 before anything
// starts.
func TestBenchMasterFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--objects", "0"},
		{"--clients", "0"},
		{"--phases", "load,nope"},
		{"--value-size", "0"},
		{"--phases", "failover"},
		{"--ha", "--phases", "restart"},
		{"--ha", "--ha-lease", "1500ms"},
		{"--ha", "--failover", "pause"},
		{"--ha", "--etcd", ""},
		{"--ha", "--etcd", "127.0.0.1:2379;nohostport"},
	} {
		code, err := Run(t.Context(), append([]string{"bench", "master", "--binary", "/nonexistent"}, args...), io.Discard, io.Discard)
		if code != 2 {
			t.Errorf("%v: exit %d (%v), want 2", args, code, err)
		}
	}
}

// TestBenchMasterFailover runs `mooncake bench master --ha` at 2k objects:
// two `mooncake master --ha` candidates in a real etcd, the node and the
// clients on etcd://, the even keys removed, then the leader SIGKILLed
// (and, in the second case, SIGSTOPped and resumed): the standby must
// lead, every object present before must be back through it, none removed
// may return, and the old leader must be replaced or step down. The etcd
// is Debian's, started by the bench (--etcd auto), when installed (always
// under CI, where scripts/deps.sh installs etcd-server); otherwise an
// embedded one of this test process (--etcd HOST:PORT).
func TestBenchMasterFailover(t *testing.T) {
	bin := buildBinary(t)
	etcdFlag := "auto"
	if _, err := exec.LookPath("etcd"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("etcd not found (CI is set): scripts/deps.sh installs etcd-server")
		}
		t.Log("etcd not installed: the bench runs on an embedded etcd")
		etcdFlag, _ = etcdtest.Start(t)
	}
	const n = 2000
	for _, tc := range []struct{ signal, oldLeader string }{
		{"kill", "replaced by a new standby"},
		{"stop", "resumed, stepped down to follower"},
	} {
		t.Run(tc.signal, func(t *testing.T) {
			var out strings.Builder
			code, err := Run(t.Context(), []string{"bench", "master", "--binary", bin, "--objects", "2000", "--clients", "4",
				"--ha", "--etcd", etcdFlag, "--ha-lease", "1s", "--failover", tc.signal, "--phases", "remove,failover",
				"--baseline", "0", "--skip-redis", "--restore-timeout", "30s", "--phase-timeout", "60s", "--pin", "--json", "--quiet"},
				&out, io.Discard)
			if code != 0 {
				t.Fatalf("bench master --ha: exit %d: %v\n%s", code, err, out.String())
			}
			var r benchmaster.Result
			if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if len(r.Failures) > 0 || r.Restart != nil {
				t.Fatalf("failures %v, restart %+v", r.Failures, r.Restart)
			}
			if r.HA == nil || r.HA.Candidates != 2 || r.HA.Cluster == "" || r.HA.Lease != time.Second {
				t.Fatalf("ha %+v", r.HA)
			}
			if len(r.After) != 3 || r.After[2].Phase != "failover" || r.After[2].Objects != n/2 || r.After[2].Segments != 1 {
				t.Fatalf("master after each phase %+v", r.After)
			}
			f := r.Failover
			if f == nil || f.Signal != tc.signal || !f.Recovered || f.Want != n/2 || f.Present != n/2 || f.RemovedBack != 0 ||
				f.RemovedTested != n/2 || f.NewView <= f.OldView || f.OldLeader != tc.oldLeader {
				t.Fatalf("failover %+v", f)
			}
			// The standby cannot lead before the leader's lease expired:
			// at least 2/3 of the 1 s TTL after the signal (the session
			// renews it every third of it).
			if f.Election < 600*time.Millisecond || f.Remount < f.Election || f.Took < f.Remount || f.RSSAfter == 0 {
				t.Fatalf("failover times: election %v, remount %v, all back %v, RSS %d", f.Election, f.Remount, f.Took, f.RSSAfter)
			}
			t.Logf("%s: election %v, remount %v, every object back %v, step down %v", tc.signal, f.Election, f.Remount, f.Took, f.StepDown)
			if tc.signal == "stop" && f.StepDown <= 0 {
				t.Fatalf("step down %v", f.StepDown)
			}
		})
	}
}
