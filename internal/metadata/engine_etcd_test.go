package metadata_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/metadata"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestEngineDiscoveryOverEtcd: two transfer engines find each other through
// a real (embedded) etcd, as with metadata_server=etcd://host:port.
func TestEngineDiscoveryOverEtcd(t *testing.T) {
	ep := metadata.StartEtcdForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	uri := "etcd://" + ep
	tgt, err := transfer.Open(ctx, transfer.Config{Metadata: uri, Transport: transfer.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	ini, err := transfer.Open(ctx, transfer.Config{Metadata: uri, Transport: transfer.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	defer ini.Close()
	remote := make([]byte, 4096)
	if err := tgt.RegisterBytes(remote, ""); err != nil {
		t.Fatal(err)
	}
	d, err := ini.Segment(ctx, tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Buffers) != 1 || d.Buffers[0].Addr != uint64(transfer.AddrOf(remote)) {
		t.Fatalf("descriptor %+v", d)
	}
	seg, err := ini.OpenSegment(ctx, tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	local := bytes.Repeat([]byte("etcd"), 1024)
	_ = ini.RegisterBytes(local, "")
	if err := ini.Transfer(ctx, []transfer.Request{{Op: transfer.OpWrite, Local: transfer.AddrOf(local), Segment: seg, Remote: uint64(transfer.AddrOf(remote)), Length: 4096}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatal("data differs")
	}
	if _, err := ini.OpenSegment(ctx, "127.0.0.1:1"); !errors.Is(err, transfer.ErrUnknownSegment) {
		t.Fatalf("unknown segment: %v", err)
	}
}
