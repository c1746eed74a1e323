package leader_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/etcdtest"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestNoLeader: a client addressing a cluster nobody leads fails within
// its RPC timeout with a clear error; a malformed address is refused.
func TestNoLeader(t *testing.T) {
	ep, _ := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eng, err := transfer.Open(ctx, transfer.Config{Transport: transfer.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	start := time.Now()
	_, err = store.New(ctx, store.Config{Master: "etcd://" + ep + "/nobody", Mover: eng, LocalBufferSize: 1 << 16, RPCTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no master leader") {
		t.Fatalf("client of a leaderless cluster: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
	t.Log(err)
	_, err = store.New(ctx, store.Config{Master: "etcd://nohost", Mover: eng})
	if err == nil || !strings.Contains(err.Error(), "malformed etcd master address") {
		t.Fatalf("bad address: %v", err)
	}
}
