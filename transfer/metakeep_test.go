package transfer

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/metadata"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// serveMetadata runs an HTTP metadata server (in memory, as `mooncake
// metadata-server`) on addr ("127.0.0.1:0" picks a port) and returns its
// address and a stop function that waits for it (the caller runs it after
// its engines closed).
func serveMetadata(t *testing.T, addr string) (string, func()) {
	t.Helper()
	var ln net.Listener
	var err error
	waitfor.Cond(t, 10*time.Second, "metadata port free", func() bool { // a restart rebinds the old port
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = metadata.NewServer(nil).Serve(ctx, ln) })
	var once sync.Once
	return ln.Addr().String(), func() { once.Do(func() { cancel(); wg.Wait() }) }
}

// TestMetadataServerRestartRepublishes: the HTTP metadata server restarts
// and loses every registration; the engines registered before put their
// descriptors back within MetadataRefresh, and an engine that joins after
// the restart finds an old one and writes to it. (Mooncake's engines
// registered once: after a metadata server restart, new nodes could not
// reach the old ones.)
func TestMetadataServerRestartRepublishes(t *testing.T) {
	var stops []func()
	t.Cleanup(func() { // after the engines' cleanups
		for _, s := range stops {
			s()
		}
	})
	addr, stop := serveMetadata(t, "127.0.0.1:0")
	stops = append(stops, stop)
	uri := "http://" + addr + "/metadata"
	cfg := Config{Metadata: uri, Transport: TransportTCP, MetadataRefresh: 50 * time.Millisecond}
	old := openEngine(t, cfg)
	remote := make([]byte, 1<<20)
	if err := old.RegisterBytes(remote, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	stop() // the metadata server restarts empty on the same port
	_, stop = serveMetadata(t, addr)
	stops = append(stops, stop)
	mc := metadata.NewHTTPClient(uri)
	defer mc.Close()
	waitfor.Cond(t, 10*time.Second, "old engine re-published", func() bool {
		_, err := mc.Get(ctxT(t), "mooncake/ram/"+old.Name())
		return err == nil
	})
	late := openEngine(t, cfg)
	seg, err := late.OpenSegment(ctxT(t), old.Name())
	if err != nil {
		t.Fatalf("an engine joining after the restart cannot find an old one: %v", err)
	}
	local := make([]byte, 1<<20)
	fill(local, 7)
	if err := late.RegisterBytes(local, ""); err != nil {
		t.Fatal(err)
	}
	if err := late.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: len(local)}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatal("data differs")
	}
}
