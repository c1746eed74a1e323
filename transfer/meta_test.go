package transfer

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/kvcache-go/mooncake/internal/metadata"
	"github.com/kvcache-go/mooncake/internal/wire"
)

func TestHTTPMetadataDiscovery(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = metadata.NewServer(nil).Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); wg.Wait() }) // after the engines' cleanups
	uri := "http://" + ln.Addr().String() + "/metadata"

	tgt, err := Open(ctxT(t), Config{Metadata: uri, Transport: TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	ini := openEngine(t, Config{Metadata: uri, Transport: TransportTCP})
	remote := make([]byte, 8192)
	if err := tgt.RegisterBytes(remote, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	// The descriptor is published under Mooncake's key.
	mc := metadata.NewHTTPClient(uri)
	defer mc.Close()
	raw, err := mc.Get(ctxT(t), "mooncake/ram/"+tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	d, err := wire.DecodeSegment(raw)
	if err != nil || len(d.Buffers) != 1 || d.Buffers[0].Addr != uint64(AddrOf(remote)) || d.TCPDataPort != tgt.RPCPort() {
		t.Fatalf("published %+v %v", d, err)
	}
	seg, err := ini.OpenSegment(ctxT(t), tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	local := make([]byte, 8192)
	fill(local, 31)
	_ = ini.RegisterBytes(local, "")
	if err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: 8192}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatal("data differs")
	}
	if err := ini.Notify(ctxT(t), tgt.Name(), "n", []byte("m")); err != nil {
		t.Fatal(err)
	}
	if n := tgt.Notifies(); len(n) != 1 {
		t.Fatalf("notifies %v", n)
	}
	if err := tgt.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Get(ctxT(t), "mooncake/ram/"+tgt.Name()); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("descriptor left after Close: %v", err)
	}
	if _, err := ini.OpenSegment(ctxT(t), "127.0.0.1:1"); !errors.Is(err, ErrUnknownSegment) {
		t.Fatalf("unknown: %v", err)
	}
}
