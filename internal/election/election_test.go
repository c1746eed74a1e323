package election_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/election"
	"github.com/kvcache-go/mooncake/internal/leader"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func candidate(t *testing.T, ep, cluster string) *election.Server {
	t.Helper()
	s, err := election.Start(election.Config{Endpoints: []string{ep}, Cluster: cluster, LeaseTTL: time.Second,
		Master: masterserver.ServerConfig{Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitRole(t *testing.T, s *election.Server, r election.Role) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.WaitRole(ctx, r); err != nil {
		t.Fatal(err)
	}
}

func etcdClient(t *testing.T, ep string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func readLeader(t *testing.T, cli *clientv3.Client, cluster string) leader.View {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, _, err := leader.ReadLeader(ctx, cli, leader.Key(cluster))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitCandidates waits until n candidates have an election key.
func waitCandidates(t *testing.T, cli *clientv3.Client, cluster string, n int) {
	t.Helper()
	waitfor.Cond(t, 15*time.Second, fmt.Sprintf("%d candidates", n), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, leader.Key(cluster)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == int64(n)
	})
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestElection: one leader serves, the standby does not; closing the
// leader hands over at once, killing it hands over when its lease ends, and
// a leader whose lease is revoked under it steps down and stops serving.
func TestElection(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	ep, stopEtcd := startEtcd(t)
	cli := etcdClient(t, ep)
	const cluster = "c1"

	a := candidate(t, ep, cluster)
	waitRole(t, a, election.RoleLeader)
	b := candidate(t, ep, cluster)
	va := a.View()
	if got := readLeader(t, cli, cluster); got != va || va.Addr != a.Master().Addr() {
		t.Fatalf("etcd says %+v, leader view %+v, master at %s", got, va, a.Master().Addr())
	}
	// The standby campaigns but does not serve.
	if b.Role() != election.RoleFollower || b.Master() != nil {
		t.Fatalf("standby role %s, master %v", b.Role(), b.Master())
	}
	code, body := httpGet(t, "http://"+b.HTTPAddr()+"/role")
	var role struct{ Role string }
	if err := json.Unmarshal([]byte(body), &role); code != 200 || err != nil || role.Role != "follower" {
		t.Fatalf("standby /role: %d %q", code, body)
	}
	if code, body := httpGet(t, "http://"+b.HTTPAddr()+"/metrics"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not leader") {
		t.Fatalf("standby /metrics: %d %q", code, body)
	}
	if code, body := httpGet(t, "http://"+b.HTTPAddr()+"/leader"); code != 200 || !strings.Contains(body, va.Addr) {
		t.Fatalf("standby /leader: %d %q", code, body)
	}
	if code, body := httpGet(t, "http://"+a.HTTPAddr()+"/metrics"); code != 200 || !strings.Contains(body, "mooncake") {
		t.Fatalf("leader /metrics: %d %q", code, body)
	}
	if code, body := httpGet(t, "http://"+a.HTTPAddr()+"/role"); code != 200 || !strings.Contains(body, `"leader"`) {
		t.Fatalf("leader /role: %d %q", code, body)
	}

	// Graceful hand-over.
	a.Close()
	waitRole(t, b, election.RoleLeader)
	vb := b.View()
	if vb.Version <= va.Version || vb.Addr == va.Addr {
		t.Fatalf("new view %+v after %+v", vb, va)
	}
	if got := readLeader(t, cli, cluster); got != vb {
		t.Fatalf("etcd says %+v, want %+v", got, vb)
	}

	// A leader whose lease is revoked steps down, stops serving, campaigns again.
	c := candidate(t, ep, cluster)
	waitCandidates(t, cli, cluster, 2) // c campaigns (so it is next in line)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, leader.Key(cluster)+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("leader key: %v", err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	waitRole(t, c, election.RoleLeader)
	waitRole(t, b, election.RoleFollower)
	if b.Master() != nil {
		t.Fatal("deposed leader still serves")
	}
	vc := c.View()
	if vc.Version <= vb.Version {
		t.Fatalf("view %+v after %+v", vc, vb)
	}

	// Crash: the lease runs out (1 s), then the standby b takes over.
	c.Kill()
	waitRole(t, b, election.RoleLeader)
	if got := readLeader(t, cli, cluster); got != b.View() || got.Version <= vc.Version {
		t.Fatalf("etcd says %+v, b's view %+v", got, b.View())
	}

	// Another cluster on the same etcd is independent.
	d := candidate(t, ep, "c2")
	waitRole(t, d, election.RoleLeader)
	if b.Role() != election.RoleLeader {
		t.Fatal("cluster c2 deposed c1's leader")
	}

	for _, s := range []*election.Server{a, b, c, d} {
		s.Close()
	}
	cli.Close()
	stopEtcd()
	goleak.VerifyNone(t, ignore)
}

func TestConfigValidate(t *testing.T) {
	ok := election.Config{Endpoints: []string{"127.0.0.1:2379"}, Master: masterserver.ServerConfig{Addr: "127.0.0.1:0"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]election.Config{
		"no endpoints": {Master: ok.Master},
		"short lease":  {Endpoints: ok.Endpoints, LeaseTTL: 100 * time.Millisecond, Master: ok.Master},
		"no addr":      {Endpoints: ok.Endpoints},
		"bad cluster":  {Endpoints: ok.Endpoints, Cluster: "a/b", Master: ok.Master},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRun: New does no I/O; Run serves the admin API on the caller's
// listener, leads, and on cancel steps down and returns nil with the
// listener closed.
func TestRun(t *testing.T) {
	ep, _ := startEtcd(t)
	cli := etcdClient(t, ep)
	s, err := election.New(election.Config{Endpoints: []string{ep}, Cluster: "run", LeaseTTL: time.Second,
		Master: masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if s.HTTPAddr() != "" || s.Role() != election.RoleFollower {
		t.Fatalf("New: http %q role %s", s.HTTPAddr(), s.Role())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx, ln) }()
	waitRole(t, s, election.RoleLeader)
	if got := readLeader(t, cli, "run"); got != s.View() {
		t.Fatalf("etcd says %+v, leader view %+v", got, s.View())
	}
	if code, body := httpGet(t, "http://"+ln.Addr().String()+"/role"); code != 200 || !strings.Contains(body, `"leader"`) {
		t.Fatalf("/role: %d %q", code, body)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if s.Role() != election.RoleStopped {
		t.Fatalf("role after Run: %s", s.Role())
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/role"); err == nil {
		t.Fatal("admin listener open after Run returned")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	resp, err := cli.Get(ctx2, leader.Key("run")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("election keys after Run returned: %v %v", resp, err)
	}
}
