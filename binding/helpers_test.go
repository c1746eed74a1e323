package main

import (
	"context"
	"testing"

	"github.com/kvcache-go/mooncake/internal/dummyclient"
	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// testMaster starts a master on a free port without its HTTP API, signing
// data-path grants with grants (nil: none); it closes (its error
// reported) when the test ends.
func testMaster(t *testing.T, grants *grant.Keyring) *masterserver.Server {
	t.Helper()
	mcfg := masterserver.DefaultServerConfig()
	mcfg.Addr, mcfg.HTTPAddr, mcfg.Grants = "127.0.0.1:0", "", grants
	m, err := masterserver.Start(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("master close: %v", err)
		}
	})
	return m
}

// inProcessStore runs a master and a storage node in this process over the
// in-process transport and opens the binding's store layer against them; all
// three close (their errors reported) when the test ends.
func inProcessStore(t *testing.T) *storeState {
	t.Helper()
	m := testMaster(t, nil)
	node, err := storenode.Start(t.Context(), storenode.Config{Master: m.Addr(), SegmentSize: 8 << 20,
		Engine: transfer.Config{Transport: transfer.TransportInproc, InprocHub: inprocHub}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Close(); err != nil {
			t.Errorf("node close: %v", err)
		}
	})
	s, err := openStore(t.Context(), storeArgs{host: "127.0.0.1", protocol: "inproc", master: m.Addr(), bufferSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Errorf("store close: %v", err)
		}
	})
	return s
}

// registerPattern fills src with byte(i*step) at each i and registers src
// and dst with s.
func registerPattern(t *testing.T, s *storeState, step int, src, dst []byte) {
	t.Helper()
	for i := range src {
		src[i] = byte(i * step)
	}
	for _, b := range [][]byte{src, dst} {
		if err := s.registerBuffer(b); err != nil {
			t.Fatal(err)
		}
	}
}

// serveDummy serves real's store client to dummy handles (setup_dummy), as
// `mooncake client` does, until the test ends; it returns the address
// openDummy takes.
func serveDummy(t *testing.T, real *storeState) string {
	t.Helper()
	addr := "binding-test-" + t.Name()
	srv, err := dummyclient.New(dummyclient.Config{Addr: addr, Store: real.c.(*store.Client), Name: real.hostname()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return addr
}
