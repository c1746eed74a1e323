// Package etcdtest starts an embedded single-node etcd for tests, on free
// loopback ports, with short raft ticks so that 1 s election leases work.
// It links the etcd server (go.etcd.io/etcd/server/v3): only tests import
// it.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Start runs an embedded etcd in a temporary directory, waits until it
// serves, and returns its client endpoint (host:port) and an idempotent
// stop function, also run at the test's cleanup.
func Start(t testing.TB) (string, func()) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "fatal" // shutdown noise is logged at error level
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cu, pu := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	var once sync.Once
	stop := func() { once.Do(e.Close) }
	t.Cleanup(stop)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("embedded etcd not ready after 30s")
	}
	return cu.Host, stop
}

func freeURL(t testing.TB) url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port)}
}
