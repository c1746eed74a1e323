package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/transfer"
)

func TestMain(m *testing.M) {
	logger = slog.New(slog.DiscardHandler) // the failures below are on purpose
	goleak.VerifyTestMain(m)
}

func TestEngineArgs(t *testing.T) {
	tests := []struct {
		name                    string
		host, meta, proto, dev  string
		wantHost                string
		wantPort                int
		wantMeta, wantTransport string
		wantWarns               int
		wantErr                 bool
	}{
		{"defaults", "", "", "", "", "127.0.0.1", 0, "P2PHANDSHAKE", "tcp", 0, false},
		{"p2p tcp", "127.0.0.1", "P2PHANDSHAKE", "tcp", "", "127.0.0.1", 0, "P2PHANDSHAKE", "tcp", 0, false},
		{"host with port", "127.0.0.1:17001", "p2phandshake", "TCP", "", "127.0.0.1", 17001, "P2PHANDSHAKE", "tcp", 0, false},
		{"http metadata", "127.0.0.2", "http://127.0.0.1:8080/metadata", "shm", "", "127.0.0.2", 0, "http://127.0.0.1:8080/metadata", "shm", 0, false},
		{"bare etcd", "127.0.0.1", "127.0.0.1:2379", "auto", "", "127.0.0.1", 0, "etcd://127.0.0.1:2379", "auto", 0, false},
		{"rdma falls back", "127.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0,mlx5_1", "127.0.0.1", 0, "P2PHANDSHAKE", "tcp", 2, false},
		{"redis unsupported", "127.0.0.1", "redis://127.0.0.1:6379", "tcp", "", "", 0, "", "", 0, true},
		{"unknown protocol", "127.0.0.1", "", "pigeon", "", "", 0, "", "", 0, true},
		{"bad port", "127.0.0.1:99999", "", "tcp", "", "", 0, "", "", 0, true},
		{"bad host", "bad/host", "", "tcp", "", "", 0, "", "", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, warns, err := engineArgs(tc.host, tc.meta, tc.proto, tc.dev)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want error, got %+v", cfg)
				}
				if codeOf(err) >= 0 {
					t.Fatalf("error %v maps to code %d", err, codeOf(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.LocalHostname != tc.wantHost || cfg.RPCPort != tc.wantPort || cfg.Metadata != tc.wantMeta || cfg.Transport != tc.wantTransport {
				t.Fatalf("got host %q port %d meta %q transport %q", cfg.LocalHostname, cfg.RPCPort, cfg.Metadata, cfg.Transport)
			}
			if len(warns) != tc.wantWarns {
				t.Fatalf("warnings %q, want %d", warns, tc.wantWarns)
			}
		})
	}
}

func TestMetadataURI(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{"", "P2PHANDSHAKE", false},
		{" p2phandshake ", "P2PHANDSHAKE", false},
		{"http://127.0.0.1:8080/metadata", "http://127.0.0.1:8080/metadata", false},
		{"HTTP://127.0.0.1:8080/metadata", "http://127.0.0.1:8080/metadata", false},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", false},
		{"etcd://127.0.0.1:2379", "etcd://127.0.0.1:2379", false},
		{"127.0.0.1:2379", "etcd://127.0.0.1:2379", false},
		{"etcd://127.0.0.1:2379;127.0.0.2:2379", "etcd://127.0.0.1:2379,127.0.0.2:2379", false},
		{"127.0.0.1:2379, 127.0.0.2:2379,", "etcd://127.0.0.1:2379,127.0.0.2:2379", false},
		{"redis://127.0.0.1:6379", "", true},
		{"https://127.0.0.1/metadata", "", true},
		{"http:///metadata", "", true},
		{"etcd://", "", true},
		{"etcd://;,", "", true},
		{"etcd://127.0.0.1:2379/x", "", true},
	}
	for _, tc := range tests {
		got, err := metadataURI(tc.in)
		if tc.wantErr {
			if err == nil || codeOf(err) != codeInvalidParams {
				t.Errorf("metadataURI(%q) = %q, %v; want an invalid-parameters error", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("metadataURI(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestTransferTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 30 * time.Second, "x": 30 * time.Second, "-3": 30 * time.Second,
		"2": 5 * time.Second, "5": 5 * time.Second, "60": time.Minute} {
		if got := transferTimeout(in); got != want {
			t.Errorf("transferTimeout(%q) = %v, want %v", in, got, want)
		}
	}
	s := &engineState{timeout: 5 * time.Second}
	if got := s.deadlineFor(1 << 30); got != 5*time.Second+time.Duration(1<<30) {
		t.Errorf("deadlineFor(1GiB) = %v", got)
	}
}

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// enginePair opens two engines through the binding layer (the in-process
// transport: a TCP write is acknowledged over a socket, which the race detector
// cannot see as synchronization; python/tests cover TCP); tgt registers a
// 1 MiB buffer, ini a 1 MiB buffer.
func enginePair(t testing.TB, transport string) (ini, tgt *engineState, ibuf, tbuf []byte) {
	t.Helper()
	open := func() *engineState {
		cfg, _, err := engineArgs("127.0.0.1", "P2PHANDSHAKE", transport, "")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Timeout = 10 * time.Second
		s, err := openEngine(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return s
	}
	tgt, ini = open(), open()
	tbuf, ibuf = make([]byte, 1<<20), make([]byte, 1<<20)
	if err := tgt.register(addr(tbuf), uint64(len(tbuf)), ""); err != nil {
		t.Fatal(err)
	}
	if err := ini.register(addr(ibuf), uint64(len(ibuf)), "cpu:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ini.unregister(addr(ibuf))
		_ = tgt.unregister(addr(tbuf))
	})
	return ini, tgt, ibuf, tbuf
}

func TestEngineSyncAndAsync(t *testing.T) {
	ini, tgt, ibuf, tbuf := enginePair(t, "inproc")
	name := tgt.e.Name()
	fill(ibuf[:64<<10], 1)
	if err := ini.transfer(name, int64(transfer.OpWrite), []uint64{addr(ibuf)}, []uint64{addr(tbuf) + 100}, []uint64{64 << 10}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tbuf[100:100+64<<10], ibuf[:64<<10]) {
		t.Fatal("write: target bytes differ")
	}
	// async read back, two batches, waited together
	b1, err := ini.submit(name, int64(transfer.OpRead), []uint64{addr(ibuf) + 512<<10}, []uint64{addr(tbuf) + 100}, []uint64{32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := ini.submit(name, int64(transfer.OpRead), []uint64{addr(ibuf) + 544<<10}, []uint64{addr(tbuf) + 100 + 32<<10}, []uint64{32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if b1 <= 0 || b2 <= 0 || b1 == b2 {
		t.Fatalf("batch ids %d %d", b1, b2)
	}
	if err := ini.wait([]int64{b1, b2}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ibuf[512<<10:576<<10], ibuf[:64<<10]) {
		t.Fatal("read: local bytes differ")
	}
	if err := ini.wait([]int64{b1}); !errors.Is(err, errBadHandle) {
		t.Fatalf("second wait: %v", err)
	}
	// submit + check until final
	fill(ibuf[:4096], 2)
	id, err := ini.submit(name, int64(transfer.OpWrite), []uint64{addr(ibuf)}, []uint64{addr(tbuf)}, []uint64{4096})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var rc int64
	for rc, err = ini.check(id, time.Now()); rc == codeCheckStillActive; rc, err = ini.check(id, time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("batch never finished")
		}
		time.Sleep(time.Millisecond)
	}
	if rc != codeCheckCompleted || err != nil {
		t.Fatalf("check = %d %v", rc, err)
	}
	if !bytes.Equal(tbuf[:4096], ibuf[:4096]) {
		t.Fatal("submitted write: target bytes differ")
	}
	if rc, _ := ini.check(id, time.Now()); rc != codeCheckFailed {
		t.Fatalf("check after final = %d", rc)
	}
}

func TestEngineFailures(t *testing.T) {
	ini, tgt, ibuf, tbuf := enginePair(t, "inproc")
	name := tgt.e.Name()
	w := int64(transfer.OpWrite)
	other := make([]byte, 64)
	tests := []struct {
		name     string
		target   string
		op       int64
		l, r, n  []uint64
		wantCode int64
	}{
		{"unknown peer", "127.0.0.1:1", w, []uint64{addr(ibuf)}, []uint64{addr(tbuf)}, []uint64{8}, codeSegmentNotFound},
		{"remote out of bounds", name, w, []uint64{addr(ibuf)}, []uint64{addr(tbuf) + 1<<20 - 4}, []uint64{8}, codeTransferFail},
		{"local not registered", name, w, []uint64{addr(other)}, []uint64{addr(tbuf)}, []uint64{8}, codeInvalidParams},
		{"local past end", name, w, []uint64{addr(ibuf) + 1<<20 - 4}, []uint64{addr(tbuf)}, []uint64{8}, codeInvalidParams},
		{"zero length", name, w, []uint64{addr(ibuf)}, []uint64{addr(tbuf)}, []uint64{0}, codeInvalidParams},
		{"bad opcode", name, 5, []uint64{addr(ibuf)}, []uint64{addr(tbuf)}, []uint64{8}, codeInvalidParams},
		{"length mismatch", name, w, []uint64{addr(ibuf)}, nil, []uint64{8}, codeInvalidParams},
		{"empty", name, w, nil, nil, nil, codeInvalidParams},
		{"empty target", "", w, []uint64{addr(ibuf)}, []uint64{addr(tbuf)}, []uint64{8}, codeInvalidParams},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ini.transfer(tc.target, tc.op, tc.l, tc.r, tc.n)
			if err == nil || codeOf(err) != tc.wantCode {
				t.Fatalf("transfer: %v (code %d), want code %d", err, codeOf(err), tc.wantCode)
			}
			id, err := ini.submit(tc.target, tc.op, tc.l, tc.r, tc.n)
			if err == nil {
				// Rejected by the peer: the batch ends failed.
				if err := ini.wait([]int64{id}); codeOf(err) != tc.wantCode {
					t.Fatalf("wait: %v (code %d), want %d", err, codeOf(err), tc.wantCode)
				}
			} else if codeOf(err) != tc.wantCode {
				t.Fatalf("submit: %v (code %d), want %d", err, codeOf(err), tc.wantCode)
			}
		})
	}
	if err := ini.unregister(addr(other)); err == nil {
		t.Fatal("unregister of unknown memory succeeded")
	}
	if err := ini.register(addr(ibuf)+8, 8, ""); codeOf(err) != codeInvalidParams {
		t.Fatalf("overlapping register: %v", err)
	}
}

// TestEngineControlTCP covers probes and segment descriptors over real TCP
// (no data moves, so there is nothing for the race detector to misread).
func TestEngineControlTCP(t *testing.T) {
	ini, tgt, _, tbuf := enginePair(t, "tcp")
	name := tgt.e.Name()
	if err := ini.probe(name); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if err := ini.probe("127.0.0.1:1"); err == nil {
		t.Fatal("probe of nobody succeeded")
	}
	if a, err := ini.firstBuffer(name); err != nil || a != addr(tbuf) {
		t.Fatalf("firstBuffer = %#x %v, want %#x", a, err, addr(tbuf))
	}
	if _, err := ini.firstBuffer("127.0.0.1:1"); codeOf(err) != codeSegmentNotFound {
		t.Fatalf("firstBuffer of nobody: %v", err)
	}
}

func TestEngineManagedAndNotify(t *testing.T) {
	ini, tgt, _, tbuf := enginePair(t, "inproc")
	a, err := ini.allocManaged(1 << 16)
	if err != nil || a == 0 {
		t.Fatalf("allocManaged: %#x %v", a, err)
	}
	ini.mu.Lock()
	m := ini.managed[a]
	ini.mu.Unlock()
	if len(m) < 1<<16 || addr(m) != a {
		t.Fatalf("managed buffer %#x not tracked", a)
	}
	m = m[:1<<16]
	fill(m, 3)
	if err := ini.transfer(tgt.e.Name(), int64(transfer.OpWrite), []uint64{a}, []uint64{addr(tbuf)}, []uint64{1 << 16}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tbuf[:1<<16], m) {
		t.Fatal("managed write differs")
	}
	if err := ini.freeManaged(a); err != nil {
		t.Fatal(err)
	}
	if err := ini.freeManaged(a); codeOf(err) != codeInvalidParams {
		t.Fatalf("double free: %v", err)
	}
	if _, err := ini.allocManaged(0); err == nil {
		t.Fatal("zero-length managed buffer allowed")
	}
	if err := ini.notify(tgt.e.Name(), "done", []byte("req-7")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err = tgt.notifiesJSON()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "[]" || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	want := fmt.Sprintf(`[{"from":%q,"name":"done","msg":"req-7"}]`, ini.e.Name())
	if string(got) != want {
		t.Fatalf("notifies = %s, want %s", got, want)
	}
	top, err := tgt.topologyJSON()
	if err != nil || !bytes.Contains(top, []byte(fmt.Sprintf(`"addr":%d`, addr(tbuf)))) {
		t.Fatalf("topology %s %v", top, err)
	}
}

func TestEngineHandles(t *testing.T) {
	if _, err := engineByHandle(-5); !errors.Is(err, errBadHandle) {
		t.Fatalf("bad handle: %v", err)
	}
}
