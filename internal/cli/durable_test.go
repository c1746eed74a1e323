package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/etcdtest"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// buildBinary builds cmd/mooncake into a temporary directory (with -race
// when the test runs with it, so the build reuses its packages).
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "mooncake")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	if out, err := exec.Command(goBin, append(args, "github.com/kvcache-go/mooncake/cmd/mooncake")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// stormValue is the deterministic value of a storm key.
func stormValue(key string) []byte {
	n := 1<<10 + len(key)*997%(48<<10)
	b := make([]byte, n)
	var s byte
	for i := range key {
		s = s*31 + key[i]
	}
	for i := range b {
		b[i] = s + byte(i*13)
	}
	return b
}

// storm puts unique keys from several goroutines and removes every fifth
// acknowledged one, recording what the store acknowledged, until stop.
type storm struct {
	mu      sync.Mutex
	acked   map[string]bool // put acknowledged (true) and not removed
	removed map[string]bool // remove acknowledged
	failed  int             // puts or removes that returned an error (outcome unknown)
	lastOK  time.Time
}

func runStorm(ctx context.Context, cl *store.Client, workers int, st *storm) *sync.WaitGroup {
	st.acked, st.removed = map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprintf("storm/%d/%d", g, i)
				pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				err := cl.Put(pctx, k, stormValue(k))
				cancel()
				st.mu.Lock()
				if err != nil {
					st.failed++
				} else {
					st.acked[k] = true
					st.lastOK = time.Now()
				}
				st.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond) // master away: do not spin
					continue
				}
				if i%5 == 4 {
					rk := fmt.Sprintf("storm/%d/%d", g, i-2)
					st.mu.Lock()
					ok := st.acked[rk]
					st.mu.Unlock()
					if !ok {
						continue
					}
					rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					err := cl.Remove(rctx, rk, true)
					cancel()
					st.mu.Lock()
					if err == nil {
						delete(st.acked, rk)
						st.removed[rk] = true
					} else {
						delete(st.acked, rk) // unknown outcome: check neither way
						st.failed++
					}
					st.mu.Unlock()
				}
			}
		})
	}
	return &wg
}

// firstOKAfter waits until a put succeeded after t0 and returns when.
func (st *storm) firstOKAfter(t *testing.T, t0 time.Time, d time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		st.mu.Lock()
		last := st.lastOK
		st.mu.Unlock()
		if last.After(t0) {
			return last.Sub(t0)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	t.Fatalf("no put succeeded within %v", d)
	return 0
}

// verify reads every acknowledged key back (retrying until the nodes have
// remounted) and checks that no acknowledged remove came back.
func (st *storm) verify(t *testing.T, cl *store.Client, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st.mu.Lock()
	defer st.mu.Unlock()
	for k := range st.acked {
		var first error
		for {
			got, err := cl.Get(ctx, k)
			if err == nil {
				if !bytes.Equal(got, stormValue(k)) {
					t.Fatalf("%s: wrong bytes", k)
				}
				break
			}
			if first == nil {
				first = err
			}
			if ctx.Err() != nil {
				t.Fatalf("acknowledged put %s not readable: %v (first error: %v)", k, err, first)
			}
			time.Sleep(20 * time.Millisecond) // a node may not have remounted yet
		}
	}
	for k := range st.removed {
		if _, err := cl.Get(ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("removed key %s came back: %v", k, err)
		}
	}
	return time.Since(start)
}

func newStormClient(t *testing.T, masterAddr string) *store.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng, err := transfer.Open(ctx, transfer.Config{Transport: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := store.New(ctx, store.Config{Master: masterAddr, Mover: eng, PingInterval: 50 * time.Millisecond, RPCTimeout: 2 * time.Second})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); eng.Close() })
	return cl
}

// finish lets the storm run on for 500ms once a put succeeded after
// killed (on the new master), stops it (cancel, wg), verifies every
// acknowledged put and remove through cl and logs the timings: label names
// the scenario, recovered what happened recoveredAfter the kill.
func (st *storm) finish(t *testing.T, cl *store.Client, cancel context.CancelFunc, wg *sync.WaitGroup, killed time.Time,
	label, recovered string, recoveredAfter time.Duration) {
	t.Helper()
	back := st.firstOKAfter(t, killed, 30*time.Second)
	time.Sleep(500 * time.Millisecond) // puts on the new master
	cancel()
	wg.Wait()
	took := st.verify(t, cl, 30*time.Second)
	t.Logf("%s: %d acknowledged puts readable, %d acknowledged removes absent, %d ops with unknown outcome; %s %v after the kill, first put %v after, verify %v",
		label, len(st.acked), len(st.removed), st.failed, recovered, recoveredAfter.Round(time.Millisecond), back.Round(time.Millisecond), took.Round(time.Millisecond))
	if len(st.acked) == 0 || len(st.removed) == 0 {
		t.Fatal("storm did nothing")
	}
}

// startStoreProcs starts two storage node processes (TCP) on the master at
// addr and waits until both have mounted. Their 2 x 128 MiB hold every
// object a storm puts (about 12 KB each, thousands per second): an
// eviction would remove acknowledged keys, which verify counts as lost.
func startStoreProcs(t *testing.T, bin, addr string) {
	t.Helper()
	for range 2 {
		n := startProc(t, bin, "store", "--master", addr, "--segment-size", "128MiB", "--transport", "tcp", "--ping-interval", "50ms", "--http-port", "-1")
		logOnFailure(t, "store node", n)
		n.waitLine(t, regexp.MustCompile(`store node mounted`), 30*time.Second)
	}
}

// logOnFailure logs what p wrote on stderr when the test failed, so that a
// failure shows what the processes saw.
func logOnFailure(t *testing.T, name string, p *proc) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s (pid %d) stderr:\n%s", name, p.cmd.Process.Pid, p.stderrText())
		}
	})
}

// TestDurableSingleMasterRestart: a master process killed with SIGKILL
// during a put storm and restarted on its port: the nodes (processes)
// re-report their objects; every acknowledged put reads back intact and no
// acknowledged remove comes back.
func TestDurableSingleMasterRestart(t *testing.T) {
	bin := buildBinary(t)
	grpcRE := regexp.MustCompile(`grpc=(\S+)`)
	m := startProc(t, bin, "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "-1", "--client-ttl", "5s")
	logOnFailure(t, "master", m)
	addr := m.waitLine(t, grpcRE, 30*time.Second)[1]
	_, port, _ := cutPort(addr)
	startStoreProcs(t, bin, addr)
	cl := newStormClient(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	var st storm
	wg := runStorm(ctx, cl, 4, &st)
	time.Sleep(700 * time.Millisecond) // let the storm run
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
	killed := time.Now()
	m2 := startProc(t, bin, "master", "--host", "127.0.0.1", "--port", port, "--http-port", "-1", "--client-ttl", "5s")
	logOnFailure(t, "restarted master", m2)
	m2.waitLine(t, grpcRE, 30*time.Second)
	up := time.Since(killed)
	st.finish(t, cl, cancel, wg, killed, "single master SIGKILL+restart", "master up", up)
}

// TestDurableHAKillLeader: two `master --ha` processes on an embedded etcd,
// two storage node processes and a client all on etcd://; the leader is
// killed with SIGKILL during a put storm; the standby takes over after the
// lease, the nodes re-report, and every acknowledged put reads back.
func TestDurableHAKillLeader(t *testing.T) {
	bin := buildBinary(t)
	ep, _ := etcdtest.Start(t)
	addr := "etcd://" + ep + "/durable"
	var masters []*proc
	var https []string
	for range 2 {
		p := startProc(t, bin, "master", "--ha", "--etcd", ep, "--cluster", "durable", "--ha-lease", "1s",
			"--host", "127.0.0.1", "--port", "0", "--http-port", "0", "--client-ttl", "5s")
		https = append(https, p.waitLine(t, regexp.MustCompile(`http=(\S+)`), 30*time.Second)[1])
		masters = append(masters, p)
	}
	leaderIdx := func() int {
		for i, h := range https {
			if role(h) == "leader" {
				return i
			}
		}
		return -1
	}
	deadline := time.Now().Add(20 * time.Second)
	for leaderIdx() < 0 {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	startStoreProcs(t, bin, addr)
	cl := newStormClient(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	var st storm
	wg := runStorm(ctx, cl, 4, &st)
	time.Sleep(700 * time.Millisecond)
	old := leaderIdx()
	_ = masters[old].cmd.Process.Signal(syscall.SIGKILL)
	<-masters[old].done
	killed := time.Now()
	for role(https[1-old]) != "leader" {
		if time.Since(killed) > 20*time.Second {
			t.Fatal("standby did not take over")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	elected := time.Since(killed)
	st.finish(t, cl, cancel, wg, killed, "HA leader SIGKILL (1s lease)", "standby leads", elected)
}

func cutPort(addr string) (string, string, bool) {
	i := len(addr) - 1
	for i >= 0 && addr[i] != ':' {
		i--
	}
	if i < 0 {
		return addr, "", false
	}
	return addr[:i], addr[i+1:], true
}

// TestDiskTierNodeRestartProcess: a master and a storage node with a disk
// tier as processes; puts beyond the memory offload objects to disk (the
// disk tier itself too small for all of them: it drops the oldest); the
// node is killed with SIGKILL and restarted on its directory and port: it
// re-reports its disk copies and they read back intact; nothing reads back
// wrong.
func TestDiskTierNodeRestartProcess(t *testing.T) {
	bin := buildBinary(t)
	m := startProc(t, bin, "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "-1", "--eviction-high-watermark", "0.5", "--client-ttl", "5s")
	addr := m.waitLine(t, regexp.MustCompile(`grpc=(\S+)`), 30*time.Second)[1]
	dir := t.TempDir()
	nodeArgs := func(port string) []string {
		return []string{"store", "--master", addr, "--segment-size", "2MiB", "--transport", "tcp", "--ping-interval", "50ms", "--http-port", "-1",
			"--rpc-port", port, "--root-fs-dir", dir, "--enable-offload", "--disk-capacity", "1MiB",
			// The reads before the kill must not promote disk copies back into
			// memory (which would leave the disk empty and nothing to re-report).
			"--promotion-on-hit=false"}
	}
	nodeRE := regexp.MustCompile(`store node mounted segment=\S+:(\d+) .* restored=(\d+)`)
	n := startProc(t, bin, nodeArgs("0")...)
	port := n.waitLine(t, nodeRE, 30*time.Second)[1]
	cl := newStormClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var keys []string
	for i := range 40 { // 40 x 128 KiB = 5 MiB through a 2 MiB segment and a 1 MiB disk tier
		k := fmt.Sprint("kv/", i)
		if err := cl.Put(ctx, k, stormValue(k)[:1024]); err != nil {
			t.Fatal(err)
		}
		big := bytes.Repeat(stormValue(k)[:1024], 128)
		if err := cl.Upsert(ctx, k, big); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
		time.Sleep(30 * time.Millisecond) // watermark evictions (ticks) offload between puts
	}
	want := func(k string) []byte { return bytes.Repeat(stormValue(k)[:1024], 128) }
	readable := func() (ok, missing int) {
		for _, k := range keys {
			got, err := cl.Get(ctx, k)
			switch {
			case err == nil && bytes.Equal(got, want(k)):
				ok++
			case errors.Is(err, store.ErrNotFound):
				missing++
			default:
				t.Fatalf("get %s: %v (equal %v)", k, err, bytes.Equal(got, want(k)))
			}
		}
		return ok, missing
	}
	// Offloading is asynchronous (the master's watermark tick, then the
	// node's copy): wait until the disk tier holds objects before the kill.
	waitfor.Cond(t, 30*time.Second, "objects offloaded to the disk tier", func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "*.obj"))
		return len(files) >= 2
	})
	before, _ := readable()
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
	killed := time.Now()
	// The master drops the dead node after --client-ttl; until then its
	// segment (same name) is still mounted.
	waitfor.Cond(t, 30*time.Second, "the master to drop the killed node", func() bool {
		for _, k := range keys {
			if _, err := cl.Get(ctx, k); !errors.Is(err, store.ErrNotFound) {
				return false
			}
		}
		return true
	})
	n2 := startProc(t, bin, nodeArgs(port)...)
	restored, _ := strconv.Atoi(n2.waitLine(t, nodeRE, 30*time.Second)[2])
	up := time.Since(killed)
	after, missing := readable()
	t.Logf("disk tier (1 MiB, full) node SIGKILL+restart: %d keys readable before, %d disk copies re-reported by the restarted node (up %v after the kill), %d readable after, %d missing, 0 wrong",
		before, restored, up.Round(time.Millisecond), after, missing)
	if restored == 0 || after < restored {
		t.Fatalf("restored %d disk copies, %d keys readable", restored, after)
	}
}
