package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ErrEtcdMissing is returned by Run with --ha and --etcd auto when etcd is
// not installed (Debian: apt-get install etcd-server).
var ErrEtcdMissing = errors.New("etcd not installed (apt-get install etcd-server)")

// etcdServer is the etcd of an HA run: Debian's etcd on free loopback
// ports, or a running one given by address.
type etcdServer struct {
	endpoints string // HOST:PORT[;HOST:PORT], as `mooncake master --etcd` takes it
	errTail   *tail  // ours: the end of its log, for failure messages
	stop      func() // kills ours and removes its directory
}

// startEtcd finds the etcd of an HA run: "auto" starts Debian's etcd (a
// single member, data in a temporary directory) on free loopback ports and
// waits until its /health answers; anything else is the endpoints of a
// running etcd, used as they are.
func startEtcd(ctx context.Context, mode string) (*etcdServer, error) {
	if mode != "auto" {
		return &etcdServer{endpoints: mode, stop: func() {}}, nil
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, ErrEtcdMissing
	}
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	dir, err := os.MkdirTemp("", "mooncake-bench-master-etcd")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer, "--initial-cluster-state", "new")
	// Debian's etcd reads ETCD_* settings from the environment: none of
	// this process's may change the member above.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	errTail := &tail{}
	cmd.Stdout, cmd.Stderr = io.Discard, errTail
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	es := &etcdServer{endpoints: fmt.Sprintf("127.0.0.1:%d", ports[0]), errTail: errTail,
		stop: func() { _ = cmd.Process.Kill(); <-done; os.RemoveAll(dir) }}
	if err := waitEtcd(ctx, client, done); err != nil {
		es.stop()
		return nil, fmt.Errorf("etcd: %w (last log line: %s)", err, errTail.lastLine())
	}
	return es, nil
}

// waitEtcd polls url's /health until it reports healthy, the process
// ended (done) or startTimeout passed.
func waitEtcd(ctx context.Context, url string, done <-chan struct{}) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"health":"true"`) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy within %v", startTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return errors.New("exited")
		case <-tick.C:
		}
	}
}
