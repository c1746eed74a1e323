package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdMember is one process of a real etcd cluster (Debian's etcd-server).
type etcdMember struct {
	name, client string
	p            *proc
}

// startEtcdCluster starts n etcd processes on loopback ports forming one
// cluster with short raft timings, and waits until it has a leader. It
// skips the test when there is no etcd binary.
func startEtcdCluster(t *testing.T, n int) []*etcdMember {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("no etcd binary (Debian etcd-server)")
	}
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	ms := make([]*etcdMember, n)
	peers := make([]string, n)
	var initial []string
	for i := range ms {
		ms[i] = &etcdMember{name: fmt.Sprint("e", i), client: free()}
		peers[i] = free()
		initial = append(initial, ms[i].name+"=http://"+peers[i])
	}
	for i, m := range ms {
		m.p = startProc(t, bin, "--name", m.name, "--data-dir", t.TempDir(),
			"--listen-client-urls", "http://"+m.client, "--advertise-client-urls", "http://"+m.client,
			"--listen-peer-urls", "http://"+peers[i], "--initial-advertise-peer-urls", "http://"+peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "error")
	}
	if !waitfor.Within(30*time.Second, func() bool { return etcdLeader(ms) >= 0 }) {
		t.Fatalf("etcd cluster without a leader; e0 log:\n%s", ms[0].p.stderrText())
	}
	return ms
}

// etcdLeader is the index of the member that leads the raft group (-1:
// none answers).
func etcdLeader(ms []*etcdMember) int {
	for i, m := range ms {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.client}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, m.client)
		cancel()
		cli.Close()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// TestEtcdLeaderFrozenMasterReelected: two `master --ha` candidates on a
// real three-member etcd cluster; the etcd leader is frozen with SIGSTOP
// (its sockets stay open, it answers nothing). The other two members elect
// a new raft leader, a master leads again and puts through etcd:// work;
// when the frozen member is thawed nothing breaks. (Mooncake's master view
// key vanished and no master was elected again.)
func TestEtcdLeaderFrozenMasterReelected(t *testing.T) {
	bin := buildBinary(t)
	ms := startEtcdCluster(t, 3)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.client)
	}
	etcd := strings.Join(eps, ";")
	addr := "etcd://" + etcd + "/frozen"
	httpRE := regexp.MustCompile(`http=(\S+)`)
	var https []string
	var masters []*proc
	dump := func() string {
		var b strings.Builder
		for i, m := range masters {
			fmt.Fprintf(&b, "--- master %d (role %q):\n%s\n", i, role(https[i]), tailLines(m.stderrText(), 15))
		}
		return b.String()
	}
	for range 2 {
		p := startProc(t, bin, "master", "--ha", "--etcd", etcd, "--cluster", "frozen", "--ha-lease", "2s",
			"--host", "127.0.0.1", "--port", "0", "--http-port", "0", "--client-ttl", "5s")
		https = append(https, p.waitLine(t, httpRE, 30*time.Second)[1])
		masters = append(masters, p)
	}
	leading := func() int {
		for i, h := range https {
			if role(h) == "leader" {
				return i
			}
		}
		return -1
	}
	elected := func() bool { return leading() >= 0 }
	if !waitfor.Within(30*time.Second, elected) {
		t.Fatal("no master elected")
	}
	startProc(t, bin, "store", "--master", addr, "--segment-size", "16MiB", "--transport", "tcp", "--ping-interval", "100ms", "--http-port", "-1").
		waitLine(t, regexp.MustCompile(`store node mounted`), 30*time.Second)
	cl := newStormClient(t, addr)
	putWithin := func(key string, d time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for tries := 0; ; tries++ {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := cl.Put(ctx, key, []byte(key))
			if tries > 0 && errors.Is(err, store.ErrExists) {
				// An earlier try that failed on the client's side (its
				// answer lost in the failover) landed: the key is this
				// test's alone, so it must hold what that try put.
				var got []byte
				if got, err = cl.Get(ctx, key); err == nil && string(got) != key {
					t.Fatalf("put %s: the key holds %q", key, got)
				}
			}
			cancel()
			if err == nil {
				return time.Since(start)
			}
			if time.Since(start) > d {
				t.Fatalf("put %s: still failing after %v: %v\n%s", key, d, err, dump())
			}
			time.Sleep(100 * time.Millisecond) // retry interval
		}
	}
	putWithin("before", 20*time.Second)
	frozen := etcdLeader(ms)
	if frozen < 0 {
		t.Fatal("no etcd leader")
	}
	if err := ms[frozen].p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = ms[frozen].p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw) // the member's SIGTERM at cleanup needs it running
	froze := time.Now()
	// A master must lead and serve puts again while the etcd leader stays
	// frozen. The old leader's lease keepalives may hang on the frozen
	// member until the client's gRPC keepalive drops that connection
	// (about 12 s), then a candidate is elected through the other two.
	d := putWithin("during", 60*time.Second)
	if !waitfor.Within(30*time.Second, elected) {
		t.Fatalf("no master leads with the etcd leader frozen\n%s", dump())
	}
	// Puts go on past twice the HA lease (the old leader's lease ran out
	// if its keepalives hung on the frozen member) and must all succeed,
	// each within 60 s (a re-election included).
	var worst time.Duration
	for i := 0; time.Since(froze) < 6*time.Second; i++ {
		worst = max(worst, putWithin(fmt.Sprint("during-", i), 60*time.Second))
		time.Sleep(100 * time.Millisecond) // pacing of the put load
	}
	if !waitfor.Within(30*time.Second, elected) {
		t.Fatalf("no master leads past the HA lease with the etcd leader frozen\n%s", dump())
	}
	t.Logf("etcd leader %s frozen: first put %v after the freeze, the longest put wait %v; a master leads %v after the freeze\n%s",
		ms[frozen].name, d.Round(10*time.Millisecond), worst.Round(10*time.Millisecond), time.Since(froze).Round(10*time.Millisecond), dump())
	thaw()
	putWithin("after", 30*time.Second)
	for _, k := range []string{"before", "during", "after"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := cl.Get(ctx, k)
		cancel()
		if err != nil || string(v) != k {
			t.Fatalf("get %s: %q %v", k, v, err)
		}
	}
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
