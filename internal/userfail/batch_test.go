package userfail

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/testbed"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// TestBatchGetSlowLinkKeepsLeases: a batch get of 10,000 keys from a
// storage node whose link is limited (tc tbf) takes many times the master's
// read lease (--lease-ttl 1s); every value still comes back, correct and
// without LEASE_EXPIRED, because the client reads in spans each under its
// own leases and re-reads a key whose lease ran out under a fresh one.
// (A Mooncake user's batch get of 6,722 keys failed with LEASE_EXPIRED even
// with a 300 s lease.)
func TestBatchGetSlowLinkKeepsLeases(t *testing.T) {
	keys, rate := 10_000, "40mbit"
	if os.Getenv("MOONCAKE_CHAOS") != "long" {
		keys, rate = 2_000, "16mbit" // the short form: the same ratio of batch time to lease
	}
	bed := testbed.ForTest(t, 2, testbed.Binary(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, err := bed.Host(0).StartMaster(ctx, "--lease-ttl", "1s", "--client-ttl", "5s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bed.Host(1).StartStore(ctx, m.GRPC, "256MiB", "--transport", "tcp", "--ping-interval", "200ms"); err != nil {
		t.Fatal(err)
	}
	eng, err := transfer.Open(ctx, transfer.Config{LocalHostname: bed.RootAddr(), Transport: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	cl, err := store.New(ctx, store.Config{Master: m.GRPC, Mover: eng, LocalBufferSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ks := make([]string, keys)
	vals := make([][]byte, keys)
	for i := range ks {
		ks[i] = fmt.Sprintf("block/%05d", i)
		vals[i] = make([]byte, 4096)
		for j := range vals[i] {
			vals[i][j] = byte(i + j*31)
		}
	}
	for i, err := range cl.BatchPut(ctx, ks, vals, store.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if err := bed.Host(1).LimitBandwidth(ctx, rate); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, errs := cl.BatchGet(ctx, ks)
	took := time.Since(start)
	bad := 0
	for i := range ks {
		if errs[i] != nil || string(got[i]) != string(vals[i]) {
			if bad < 5 {
				t.Errorf("key %d: %v", i, errs[i])
			}
			bad++
		}
	}
	t.Logf("batch get of %d x 4 KiB over %s: %v (%.0fx the 1 s lease), %d keys failed", keys, rate, took.Round(time.Millisecond), took.Seconds(), bad)
	if took < 2*time.Second {
		t.Fatalf("the batch took %v: the link limit did not slow it past the lease", took)
	}
}
