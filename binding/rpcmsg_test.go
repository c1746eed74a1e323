package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
	"unsafe"
)

func startRPC(t *testing.T) (*rpcServer, *rpcClient, string) {
	return startRPCWith(t, rpcMaxHeld)
}

func startRPCWith(t *testing.T, maxHeld int64) (*rpcServer, *rpcClient, string) {
	t.Helper()
	s, err := listenRPCWith("127.0.0.1:0", 5*time.Second, maxHeld)
	if err != nil {
		t.Fatal(err)
	}
	c := newRPCClient(2, 5*time.Second)
	t.Cleanup(func() {
		c.close()
		if err := s.close(); err != nil {
			t.Errorf("server close: %v", err)
		}
	})
	return s, c, s.ln.Addr().String()
}

func recvOne(t *testing.T, s *rpcServer) rpcMsg {
	t.Helper()
	m, ok, err := s.recv(5 * time.Second)
	if err != nil || !ok {
		t.Fatalf("recv: ok=%v err=%v", ok, err)
	}
	return m
}

func TestRPCMessagesArriveInOrderOverReusedConnections(t *testing.T) {
	s, c, addr := startRPC(t)
	big := bytes.Repeat([]byte("x"), 3<<20)
	msgs := [][]byte{[]byte("hello"), {}, big, []byte("last")}
	for i, m := range msgs {
		kind := byte(rpcKindData)
		if i == 2 {
			kind = rpcKindTensor
		}
		if err := c.send(addr, kind, m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i, want := range msgs {
		m := recvOne(t, s)
		if !bytes.Equal(m.data, want) {
			t.Fatalf("message %d: %d bytes, want %d", i, len(m.data), len(want))
		}
		if i == 2 && m.kind != rpcKindTensor || i != 2 && m.kind != rpcKindData {
			t.Fatalf("message %d kind %d", i, m.kind)
		}
		if host, _, err := net.SplitHostPort(m.source); err != nil || host != "127.0.0.1" {
			t.Fatalf("source %q", m.source)
		}
	}
	if n := len(c.idle[addr]); n != 1 {
		t.Fatalf("%d idle connections, want 1 (reused)", n)
	}
	if _, ok, err := s.recv(10 * time.Millisecond); ok || err != nil {
		t.Fatalf("empty queue: ok=%v err=%v", ok, err)
	}
}

func TestRPCBadFrameIsRefusedAndServerKeepsServing(t *testing.T) {
	s, c, addr := startRPC(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hdr := encodeRPCHeader(rpcKindData, 0)
	binary.LittleEndian.PutUint64(hdr[8:], rpcMaxMessage+1)
	if _, err := conn.Write(hdr); err != nil {
		t.Fatal(err)
	}
	var reply [4]byte
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		t.Fatal(err)
	}
	if code := int32(binary.LittleEndian.Uint32(reply[:])); code != codeInvalidParams {
		t.Fatalf("reply %d, want %d", code, codeInvalidParams)
	}
	if err := c.send(addr, rpcKindData, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if m := recvOne(t, s); string(m.data) != "after" {
		t.Fatalf("got %q", m.data)
	}
}

func TestRPCStaleConnectionIsRetriedAndDeadTargetFails(t *testing.T) {
	s, c, addr := startRPC(t)
	if err := c.send(addr, rpcKindData, []byte("one")); err != nil {
		t.Fatal(err)
	}
	recvOne(t, s)
	// The server drops its side of the pooled connection.
	s.mu.Lock()
	for conn := range s.conns {
		conn.Close()
	}
	s.mu.Unlock()
	if err := c.send(addr, rpcKindData, []byte("two")); err != nil {
		t.Fatalf("send on a stale pooled connection: %v", err)
	}
	if m := recvOne(t, s); string(m.data) != "two" {
		t.Fatalf("got %q", m.data)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	err := c.send(addr, rpcKindData, []byte("three"))
	if !errors.Is(err, errRPC) || codeOf(err) != codeRPCFail {
		t.Fatalf("send to a closed server: %v (code %d)", err, codeOf(err))
	}
	if _, _, err := s.recv(time.Millisecond); !errors.Is(err, errBadHandle) {
		t.Fatalf("recv on a closed server: %v", err)
	}
}

func TestRPCMemoryBudgetRefusesAndRecovers(t *testing.T) {
	s, c, addr := startRPCWith(t, 1<<20)
	if err := c.send(addr, rpcKindData, make([]byte, 700<<10)); err != nil {
		t.Fatal(err)
	}
	// Queued and not yet received: a second 700 KiB passes the 1 MiB budget.
	if err := c.send(addr, rpcKindData, make([]byte, 700<<10)); !errors.Is(err, errRPC) {
		t.Fatalf("send past the budget: %v", err)
	}
	if m := recvOne(t, s); len(m.data) != 700<<10 {
		t.Fatalf("got %d bytes", len(m.data))
	}
	if got := s.held.Load(); got != 0 {
		t.Fatalf("%d bytes held after the queue drained", got)
	}
	if err := c.send(addr, rpcKindData, make([]byte, 700<<10)); err != nil {
		t.Fatalf("send after the queue drained: %v", err)
	}
	recvOne(t, s)
}

func TestRPCEncodedMessageLayout(t *testing.T) {
	b := encodeRPCMsg(rpcMsg{kind: rpcKindTensor, source: "1.2.3.4:5", data: []byte("abc")})
	if b[0] != rpcKindTensor || binary.LittleEndian.Uint16(b[1:]) != 9 || string(b[3:12]) != "1.2.3.4:5" || string(b[12:]) != "abc" {
		t.Fatalf("layout %q", b)
	}
}

func TestGatherCopy(t *testing.T) {
	srcs := [][]byte{[]byte("ab"), nil, []byte("cde"), []byte("f"), []byte("ghij")}
	for _, threads := range []int{1, 2, 3, 16} {
		ps := make([]unsafe.Pointer, len(srcs))
		ns := make([]uint64, len(srcs))
		for i, s := range srcs {
			if len(s) > 0 {
				ps[i] = unsafe.Pointer(&s[0])
			}
			ns[i] = uint64(len(s))
		}
		out := make([]byte, 10)
		gatherCopy(out, ps, ns, threads)
		if string(out) != "abcdefghij" {
			t.Fatalf("threads=%d: %q", threads, out)
		}
	}
}

func FuzzRPCHeader(f *testing.F) {
	f.Add(encodeRPCHeader(rpcKindData, 5))
	f.Add(encodeRPCHeader(rpcKindTensor, rpcMaxMessage))
	f.Add([]byte("MCRI\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeRPCHeader(b)
		if err != nil {
			if !errors.Is(err, errRPCFrame) {
				t.Fatalf("error %v is not errRPCFrame", err)
			}
			return
		}
		if h.length > rpcMaxMessage || (h.kind != rpcKindData && h.kind != rpcKindTensor) {
			t.Fatalf("accepted %+v", h)
		}
		if !bytes.Equal(encodeRPCHeader(h.kind, int(h.length)), b) {
			t.Fatalf("header %x does not round-trip", b)
		}
	})
}
