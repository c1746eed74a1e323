package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

// TestMooncakeMasterFlagSpellings: Mooncake's master flags are accepted
// with their units (--client_ttl in seconds, --default_kv_lease_ttl in
// milliseconds; a Go duration works too); nonsense is refused.
func TestMooncakeMasterFlagSpellings(t *testing.T) {
	var core master.Config
	cmd := newMasterCmd()
	for _, tc := range []struct {
		flag, val string
		got       *time.Duration
		want      time.Duration
	}{
		{"client_ttl", "30", &core.ClientTTL, 30 * time.Second},
		{"client_live_ttl_sec", "45", &core.ClientTTL, 45 * time.Second},
		{"client_ttl", "1m", &core.ClientTTL, time.Minute},
		{"default_kv_lease_ttl", "5000", &core.LeaseTTL, 5 * time.Second},
		{"default_kv_lease_ttl", "250ms", &core.LeaseTTL, 250 * time.Millisecond},
	} {
		u := unitDuration{tc.got, map[string]time.Duration{"client_ttl": time.Second, "client_live_ttl_sec": time.Second, "default_kv_lease_ttl": time.Millisecond}[tc.flag]}
		if err := u.Set(tc.val); err != nil || *tc.got != tc.want {
			t.Errorf("--%s %s: %v, %v (want %v)", tc.flag, tc.val, err, *tc.got, tc.want)
		}
	}
	for _, bad := range []string{"0", "-3", "soon", "-1s"} {
		if err := (unitDuration{&core.ClientTTL, time.Second}).Set(bad); err == nil {
			t.Errorf("--client_ttl %q accepted", bad)
		}
	}
	if err := cmd.Flags().Parse([]string{"--client_ttl", "7", "--default_kv_lease_ttl", "900", "--eviction_high_watermark_ratio", "0.8"}); err != nil {
		t.Fatal(err)
	}
	_ = masterserver.DefaultServerConfig
	for _, n := range []string{"client_ttl", "default_kv_lease_ttl", "eviction_high_watermark_ratio", "eviction_ratio", "client_live_ttl_sec", "max-memory"} {
		if cmd.Flags().Lookup(n) == nil {
			t.Errorf("flag --%s missing", n)
		}
	}
}

// TestMaxMemoryFlag: sizes, 0 and auto (the cgroup's limit; "max" and v1's
// huge number mean none).
func TestMaxMemoryFlag(t *testing.T) {
	cg := func() uint64 { return 3 << 30 }
	for _, tc := range []struct {
		v    string
		want uint64
	}{{"auto", 3 << 30}, {"", 3 << 30}, {"0", 0}, {"none", 0}, {"512MiB", 512 << 20}, {"2gb", 2 << 30}} {
		got, err := (&maxMemoryFlag{tc.v}).limit(cg)
		if err != nil || got != tc.want {
			t.Errorf("--max-memory %q: %d, %v (want %d)", tc.v, got, err, tc.want)
		}
	}
	if _, err := (&maxMemoryFlag{"lots"}).limit(cg); err == nil {
		t.Error("--max-memory lots accepted")
	}
	for s, want := range map[string]uint64{"max\n": 0, "9223372036854771712\n": 0, "1073741824\n": 1 << 30, "junk": 0} {
		if got := parseCgroupLimit(s); got != want {
			t.Errorf("cgroup limit %q: %d, want %d", s, got, want)
		}
	}
}

// TestClientTTLFlagDropsDeadNode is the configurable client TTL on the real
// binary: with Mooncake's --client_ttl 1 a storage node killed with SIGKILL
// is dropped by the master (its segment unmounted) long before the 10 s
// default, and a node that keeps pinging is never dropped.
func TestClientTTLFlagDropsDeadNode(t *testing.T) {
	bin := buildBinary(t)
	m := startProc(t, bin, "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "-1", "--client_ttl", "1", "--default_kv_lease_ttl", "2000")
	addr := m.waitLine(t, regexp.MustCompile(`grpc=(\S+)`), 30*time.Second)[1]
	var nodes []*proc
	for range 2 {
		n := startProc(t, bin, "store", "--master", addr, "--segment-size", "32MiB", "--transport", "tcp", "--ping-interval", "100ms", "--http-port", "-1")
		n.waitLine(t, regexp.MustCompile(`store node mounted`), 30*time.Second)
		nodes = append(nodes, n)
	}
	_ = nodes[0].cmd.Process.Signal(syscall.SIGKILL)
	<-nodes[0].done
	killed := time.Now()
	// Well inside the 10 s default: the flag took.
	if !waitfor.Within(8*time.Second, func() bool { return strings.Contains(m.stderrText(), "client dropped") }) {
		t.Fatalf("dead node not dropped %v after SIGKILL with --client_ttl 1; master log:\n%s", time.Since(killed), m.stderrText())
	}
	t.Logf("dead node dropped %v after SIGKILL (--client_ttl 1)", time.Since(killed).Round(10*time.Millisecond))
	// The live node keeps its segment: a put and a get still work through it.
	cl := newStormClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.Put(ctx, "alive", []byte("yes")); err != nil {
		t.Fatalf("put after the drop: %v", err)
	}
	if got := strings.Count(m.stderrText(), "client dropped"); got != 1 {
		t.Fatalf("%d clients dropped, want 1:\n%s", got, m.stderrText())
	}
}

// TestMasterMaxMemoryRefusesFlood: a master started with --max-memory and
// flooded with long-key objects refuses new ones with NO_AVAILABLE_HANDLE
// naming its memory limit, keeps serving the objects it holds, never
// crashes, and takes puts again once objects are removed.
func TestMasterMaxMemoryRefusesFlood(t *testing.T) {
	bin := buildBinary(t)
	const limit = 32 << 20
	m := startProc(t, bin, "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "-1", "--max-memory", strconv.Itoa(limit))
	addr := m.waitLine(t, regexp.MustCompile(`grpc=(\S+)`), 30*time.Second)[1]
	n := startProc(t, bin, "store", "--master", addr, "--segment-size", "512MiB", "--transport", "tcp", "--http-port", "-1")
	n.waitLine(t, regexp.MustCompile(`store node mounted`), 30*time.Second)
	cl := newStormClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pad := strings.Repeat("k", 4000) // long-context block keys
	var stored []string
	var refusal error
	for b := 0; refusal == nil; b++ {
		if b > 200 {
			t.Fatalf("%d objects stored under a %d-byte limit and no refusal", len(stored), limit)
		}
		keys := make([]string, 256)
		vals := make([][]byte, 256)
		for i := range keys {
			keys[i] = fmt.Sprintf("flood/%d/%d/%s", b, i, pad)
			vals[i] = []byte(keys[i][:16])
		}
		for i, err := range cl.BatchPut(ctx, keys, vals, store.PutOptions{}) {
			switch {
			case err == nil:
				stored = append(stored, keys[i])
			case errors.Is(err, store.ErrNoSpace) && strings.Contains(err.Error(), "master memory limit"):
				refusal = err
			default:
				t.Fatalf("put %d: unexpected error %v", len(stored), err)
			}
		}
	}
	msg := refusal.Error()
	t.Logf("%d objects of 4 KiB keys stored, then: %s", len(stored), msg[strings.LastIndex(msg, "no space"):])
	select {
	case <-m.done:
		t.Fatalf("master exited; stderr:\n%s", m.stderrText())
	default:
	}
	rss := procRSS(t, m.cmd.Process.Pid)
	t.Logf("master RSS %d MiB under a %d MiB limit (race build: %v)", rss>>20, limit>>20, raceEnabled)
	// The limit is the Go runtime's memory; the binary's code (about 20
	// MiB resident) and, under -race, the detector's shadow memory come on top.
	if !raceEnabled && rss > limit+24<<20 {
		t.Errorf("master RSS %d MiB above its %d MiB limit and the code", rss>>20, limit>>20)
	}
	for _, k := range []string{stored[0], stored[len(stored)/2], stored[len(stored)-1]} {
		v, err := cl.Get(ctx, k)
		if err != nil || string(v) != k[:16] {
			t.Fatalf("stored object after the refusal: %q, %v", v, err)
		}
	}
	for i, err := range cl.BatchRemove(ctx, stored[:len(stored)*3/4], true) {
		if err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cl.Put(ctx, "after/"+pad, []byte("x"))
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrNoSpace) || time.Now().After(deadline) {
			t.Fatalf("put after removing 3/4 of the objects: %.200v", err)
		}
		time.Sleep(50 * time.Millisecond) // the next GC returns the removed objects' memory
	}
}

// procRSS reads a process's resident set in bytes.
func procRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
