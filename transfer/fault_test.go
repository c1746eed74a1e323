package transfer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/wire"
)

func TestChecksumRoundTrip(t *testing.T) {
	ini, tgt, seg := pair(t, TransportTCP, func(c *Config) { c.Checksum = true; c.SliceSize = 64 << 10 })
	remote := make([]byte, 1<<20)
	local := make([]byte, 1<<20)
	back := make([]byte, 1<<20)
	_ = tgt.RegisterBytes(remote, "")
	_ = ini.RegisterBytes(local, "")
	_ = ini.RegisterBytes(back, "")
	fill(local, 5)
	ctx := ctxT(t)
	if err := ini.Transfer(ctx, []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: len(local)}}); err != nil {
		t.Fatal(err)
	}
	if err := ini.Transfer(ctx, []Request{{Op: OpRead, Local: AddrOf(back), Segment: seg, Remote: uint64(AddrOf(remote)), Length: len(local)}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, local) {
		t.Fatal("data differs")
	}
}

func TestWrongSecret(t *testing.T) {
	tgt := openEngine(t, Config{Secret: "s3cret"})
	bad := openEngine(t, Config{Secret: "wrong"})
	none := openEngine(t, Config{})
	good := openEngine(t, Config{Secret: "s3cret"})
	for name, e := range map[string]*Engine{"wrong": bad, "none": none} {
		if _, err := e.OpenSegment(ctxT(t), tgt.Name()); !errors.Is(err, ErrAuth) {
			t.Fatalf("%s secret: err = %v, want ErrAuth", name, err)
		}
		if err := e.Probe(ctxT(t), tgt.Name()); !errors.Is(err, ErrAuth) {
			t.Fatalf("%s secret probe: err = %v", name, err)
		}
		if err := e.Notify(ctxT(t), tgt.Name(), "x", nil); !errors.Is(err, ErrAuth) {
			t.Fatalf("%s secret notify: err = %v", name, err)
		}
	}
	if len(tgt.Notifies()) != 0 {
		t.Fatal("unauthenticated notify delivered")
	}
	seg, err := good.OpenSegment(ctxT(t), tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	remote, local := make([]byte, 4096), make([]byte, 4096)
	_ = tgt.RegisterBytes(remote, "")
	_ = good.RegisterBytes(local, "")
	fill(local, 6)
	if err := good.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: 4096}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(remote, local) {
		t.Fatal("data differs")
	}
}

// rawLane opens a data lane to e by hand.
func rawLane(t *testing.T, e *Engine) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.Name(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b, _ := json.Marshal(wire.Control{Lane: &wire.Lane{}})
	if err := wire.WriteFrame(c, wire.FrameLane, b); err != nil {
		t.Fatal(err)
	}
	_, body, err := wire.ReadFrame(c, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := wire.DecodeControl(body); err != nil || !rep.OK {
		t.Fatalf("lane refused: %+v %v", rep, err)
	}
	return c
}

// requireServing checks that e still serves a normal transfer.
func requireServing(t *testing.T, e *Engine) {
	t.Helper()
	ini := openEngine(t, Config{Transport: TransportTCP})
	seg, err := ini.OpenSegment(ctxT(t), e.Name())
	if err != nil {
		t.Fatal(err)
	}
	remote, local := make([]byte, 1000), make([]byte, 1000)
	fill(local, 9)
	_ = e.RegisterBytes(remote, "")
	defer func() { _ = e.Unregister(AddrOf(remote)) }()
	_ = ini.RegisterBytes(local, "")
	if err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: 1000}}); err != nil {
		t.Fatalf("engine stopped serving: %v", err)
	}
	if !bytes.Equal(local, remote) {
		t.Fatal("data differs")
	}
}

func TestGarbageAndOversizedFrames(t *testing.T) {
	tgt := openEngine(t, Config{MaxSlice: 1 << 20, SliceSize: 256 << 10})
	remote := make([]byte, 4096)
	_ = tgt.RegisterBytes(remote, "")
	control := map[string][]byte{
		"http":           []byte("GET /metadata HTTP/1.1\r\nHost: x\r\n\r\n"),
		"tls":            {0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03},
		"huge length":    binary.LittleEndian.AppendUint64(nil, 1<<40),
		"bad json":       append(binary.LittleEndian.AppendUint64(nil, 5), 1, '{', '{', '{', '{'),
		"zero length":    binary.LittleEndian.AppendUint64(nil, 0),
		"unknown type":   append(binary.LittleEndian.AppendUint64(nil, 3), 77, '{', '}'),
		"truncated body": append(binary.LittleEndian.AppendUint64(nil, 100), 1, '{'),
	}
	for name, in := range control {
		t.Run("control/"+name, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", tgt.Name(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = c.Write(in)
			if name == "truncated body" {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			// The engine answers with an error frame or just closes; either
			// way the connection ends.
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						t.Fatal("connection not dropped")
					}
					break
				}
			}
		})
	}
	lane := map[string][]byte{
		"oversized slice": hdr(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: uint64(AddrOf(remote)), Length: 2 << 20}),
		"bad opcode":      hdr(wire.ReqHeader{Op: 9, ID: 1, Addr: uint64(AddrOf(remote)), Length: 8}),
		"reserved bits": func() []byte {
			b := hdr(wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: 1, Length: 8})
			b[2] = 1
			return b
		}(),
	}
	for name, in := range lane {
		t.Run("lane/"+name, func(t *testing.T) {
			c := rawLane(t, tgt)
			_, _ = c.Write(in)
			buf := make([]byte, 64)
			if _, err := c.Read(buf); err == nil {
				t.Fatal("lane answered a malformed header")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("lane not dropped")
			}
		})
	}
	t.Run("lane/zero length rejected but lane stays", func(t *testing.T) {
		c := rawLane(t, tgt)
		_, _ = c.Write(hdr(wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: uint64(AddrOf(remote)), Length: 0}))
		_, _ = c.Write(hdr(wire.ReqHeader{Op: wire.OpRead, ID: 2, Addr: uint64(AddrOf(remote)), Length: 8}))
		rb := make([]byte, wire.RespHeaderSize)
		for i, want := range []struct {
			status byte
			n      uint64
		}{{wire.StatusRejected, 0}, {wire.StatusOK, 8}} {
			if _, err := readFull(c, rb); err != nil {
				t.Fatal(err)
			}
			h, err := wire.DecodeRespHeader(rb, 1<<20)
			if err != nil || h.Status != want.status || h.Length != want.n || h.ID != uint64(i+1) {
				t.Fatalf("response %d: %+v %v", i, h, err)
			}
		}
	})
	requireServing(t, tgt)
}

func hdr(h wire.ReqHeader) []byte {
	b := make([]byte, wire.ReqHeaderSize)
	h.Put(b)
	return b
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestUnregisterWhileInFlight(t *testing.T) {
	ini, tgt, seg := pair(t, TransportTCP, func(c *Config) { c.SliceSize = 64 << 10 })
	const size = 16 << 20
	remote := make([]byte, size)
	local := make([]byte, size)
	_ = tgt.RegisterBytes(remote, "")
	_ = ini.RegisterBytes(local, "")
	var rejected, completed int
	for round := 0; round < 5 && rejected == 0; round++ {
		b, err := ini.Submit(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: size}})
		if err != nil {
			t.Fatal(err)
		}
		if err := tgt.Unregister(AddrOf(remote)); err != nil {
			t.Fatal(err)
		}
		err = b.Wait(ctxT(t))
		b.Free()
		switch {
		case err == nil:
			completed++
		case errors.Is(err, ErrOutOfBounds):
			rejected++
		default:
			t.Fatalf("unexpected error %v", err)
		}
		_ = tgt.RegisterBytes(remote, "")
	}
	if rejected == 0 {
		t.Skipf("unregister never overtook the transfer (%d completed)", completed)
	}
	// Local side: Unregister waits for the in-flight transfer, which then
	// finishes; later submits are refused.
	b, err := ini.Submit(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: size}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ini.Unregister(AddrOf(local)); err != nil {
		t.Fatal(err)
	}
	// The transfer started before Unregister, so it ran to completion.
	if err := b.Wait(ctxT(t)); err != nil {
		t.Fatalf("in-flight transfer after local unregister: %v", err)
	}
	b.Free()
	if _, err := ini.Submit(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: 10}}); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("submit after unregister: %v", err)
	}
}

// silentPeer answers the handshake like an engine, then never replies on lanes.
func silentPeer(t *testing.T) (name string, addr uint64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	name = ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	addr = 1 << 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			typ, _, err := wire.ReadFrame(c, 1<<20)
			if err != nil {
				continue
			}
			seg := wire.Segment{Name: name, Protocol: "tcp", IP: "127.0.0.1", RPCPort: port, TCPDataPort: port,
				Buffers: []wire.Buffer{{Name: "b", Addr: addr, Length: 1 << 30}}}
			b, _ := json.Marshal(wire.Control{OK: true, Segment: &seg})
			_ = wire.WriteFrame(c, typ, b)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return name, addr
}

func TestDeadlineOnSilentPeer(t *testing.T) {
	ini := openEngine(t, Config{Transport: TransportTCP})
	name, raddr := silentPeer(t)
	seg, err := ini.OpenSegment(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	local := make([]byte, 1<<20)
	_ = ini.RegisterBytes(local, "")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	b, err := ini.Submit(ctx, []Request{
		{Op: OpRead, Local: AddrOf(local), Segment: seg, Remote: raddr, Length: len(local)},
		{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: raddr, Length: 4096},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Wait(context.Background())
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
	for i := range 2 {
		if b.Status(i) != StatusTimeout {
			t.Fatalf("status %d = %v", i, b.Status(i))
		}
	}
	b.Free()
	// Wait's own context also bounds it.
	b, err = ini.Submit(context.Background(), []Request{{Op: OpRead, Local: AddrOf(local), Segment: seg, Remote: raddr, Length: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer wcancel()
	if err := b.Wait(wctx); !errors.Is(err, ErrTimeout) {
		t.Fatalf("wait ctx: %v", err)
	}
	b.Free()
}

// TestTransferUntilOnSilentPeer: TransferUntil's own deadline ends a
// transfer to a peer that never answers, with no context deadline.
func TestTransferUntilOnSilentPeer(t *testing.T) {
	ini := openEngine(t, Config{Transport: TransportTCP})
	name, raddr := silentPeer(t)
	seg, err := ini.OpenSegment(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	local := make([]byte, 4096)
	_ = ini.RegisterBytes(local, "")
	start := time.Now()
	err = ini.TransferUntil(context.Background(), start.Add(200*time.Millisecond),
		[]Request{{Op: OpRead, Local: AddrOf(local), Segment: seg, Remote: raddr, Length: len(local)}})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %v", el)
	}
}

func TestPeerDiesMidBatch(t *testing.T) {
	dying := startPeer(t, 32<<20, TransportTCP)
	healthy := startPeer(t, 1<<20, TransportTCP)
	ini := openEngine(t, Config{Transport: TransportTCP, SliceSize: 64 << 10})
	segD, err := ini.OpenSegment(ctxT(t), dying.name)
	if err != nil {
		t.Fatal(err)
	}
	segH, err := ini.OpenSegment(ctxT(t), healthy.name)
	if err != nil {
		t.Fatal(err)
	}
	local := make([]byte, 32<<20)
	_ = ini.RegisterBytes(local, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Keep the dying peer busy with large batches while we kill it.
	var reqs []Request
	for i := 0; i < 8; i++ {
		reqs = append(reqs, Request{Op: OpWrite, Local: AddrOf(local), Segment: segD, Remote: dying.addr, Length: dying.size})
	}
	b, err := ini.Submit(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	_ = dying.cmd.Process.Kill()
	start := time.Now()
	err = b.Wait(ctx)
	b.Free()
	if err == nil {
		t.Skip("batch finished before the peer died")
	}
	if !errors.Is(err, ErrPeerDown) {
		t.Fatalf("err = %v, want ErrPeerDown", err)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatal("batch did not fail promptly")
	}
	// Another peer is unaffected.
	fill(local[:4096], 11)
	if err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: segH, Remote: healthy.addr, Length: 4096}}); err != nil {
		t.Fatalf("healthy peer: %v", err)
	}
	back := make([]byte, 4096)
	_ = ini.RegisterBytes(back, "")
	if err := ini.Transfer(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(back), Segment: segH, Remote: healthy.addr, Length: 4096}}); err != nil {
		t.Fatalf("healthy peer read: %v", err)
	}
	if !bytes.Equal(back, local[:4096]) {
		t.Fatal("healthy peer data differs")
	}
	// The dead peer now fails fast.
	_ = dying.cmd.Wait()
	err = ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: segD, Remote: dying.addr, Length: 4096}})
	if !errors.Is(err, ErrPeerDown) {
		t.Fatalf("after death: %v", err)
	}
}

func TestCloseFailsInFlight(t *testing.T) {
	name, raddr := silentPeer(t)
	ini, err := Open(ctxT(t), Config{Transport: TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	seg, err := ini.OpenSegment(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	local := make([]byte, 4096)
	_ = ini.RegisterBytes(local, "")
	b, err := ini.Submit(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(local), Segment: seg, Remote: raddr, Length: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ini.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
	if _, err := ini.Submit(ctxT(t), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close: %v", err)
	}
}

// TestMixedTrafficBothWays: reads and writes in both directions at once,
// large and small, must all complete (no token deadlock between engines).
func TestMixedTrafficBothWays(t *testing.T) {
	a := openEngine(t, Config{Transport: TransportTCP, SliceSize: 64 << 10})
	b := openEngine(t, Config{Transport: TransportTCP, SliceSize: 64 << 10})
	const size = 4 << 20
	bufs := map[*Engine][]byte{a: make([]byte, size), b: make([]byte, size)}
	for e, buf := range bufs {
		if err := e.RegisterBytes(buf, ""); err != nil {
			t.Fatal(err)
		}
	}
	segs := map[*Engine]SegmentID{}
	for e, peer := range map[*Engine]*Engine{a: b, b: a} {
		id, err := e.OpenSegment(ctxT(t), peer.Name())
		if err != nil {
			t.Fatal(err)
		}
		segs[e] = id
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	// Each worker owns a distinct quarter of its local buffer and of the
	// peer's, so the test itself has no data races.
	worker := func(e, peer *Engine, op Opcode, q int, n int) {
		defer wg.Done()
		off := q * (size / 4)
		for i := 0; i < 20; i++ {
			ln := n
			if i%3 == 0 {
				ln = 4096
			}
			err := e.Transfer(ctx, []Request{{Op: op, Local: AddrOf(bufs[e][off:]), Segment: segs[e], Remote: uint64(AddrOf(bufs[peer][off:])), Length: ln}})
			if err != nil {
				errc <- err
				return
			}
		}
	}
	wg.Add(4)
	go worker(a, b, OpWrite, 0, size/4)
	go worker(a, b, OpRead, 1, size/4)
	go worker(b, a, OpWrite, 2, size/4)
	go worker(b, a, OpRead, 3, size/4)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func TestReplayGuard(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newReplayGuard(time.Minute, func() time.Time { return now })
	nonce := func(ts time.Time, r byte) []byte {
		b := make([]byte, 16)
		binary.BigEndian.PutUint64(b, uint64(ts.UnixNano()))
		b[15] = r
		return b
	}
	cases := []struct {
		name  string
		nonce []byte
		want  bool
	}{
		{"fresh", nonce(now, 1), true},
		{"replayed", nonce(now, 1), false},
		{"another fresh", nonce(now.Add(-30*time.Second), 2), true},
		{"too old", nonce(now.Add(-2*time.Minute), 3), false},
		{"from the future", nonce(now.Add(2*time.Minute), 4), false},
		{"short", []byte{1, 2, 3}, false},
	}
	for _, c := range cases {
		if got := g.fresh(c.nonce); got != c.want {
			t.Errorf("%s: fresh = %v, want %v", c.name, got, c.want)
		}
	}
	// Old entries are pruned once the window has passed (and the set is big).
	for i := range 1100 {
		g.fresh(nonce(now, byte(i%200)+10))
	}
	now = now.Add(5 * time.Minute)
	for i := range 1100 {
		n := nonce(now, 0)
		binary.BigEndian.PutUint32(n[8:], uint32(i))
		if !g.fresh(n) {
			t.Fatalf("fresh nonce %d rejected", i)
		}
	}
	g.mu.Lock()
	size := len(g.seen)
	g.mu.Unlock()
	if size > 1200 {
		t.Fatalf("replay set not pruned: %d entries", size)
	}
}

func TestReplayedHandshakeRejected(t *testing.T) {
	tgt := openEngine(t, Config{Secret: "s3cret"})
	ini := openEngine(t, Config{Secret: "s3cret"})
	// Record one valid proof and present it twice.
	proof := ini.auth()
	for i, want := range []bool{true, false} {
		c, err := net.DialTimeout("tcp", tgt.Name(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(wire.Control{Auth: proof})
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := wire.WriteFrame(c, wire.FrameProbe, b); err != nil {
			t.Fatal(err)
		}
		_, body, err := wire.ReadFrame(c, 1<<20)
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		rep, _ := wire.DecodeControl(body)
		if rep.OK != want {
			t.Fatalf("attempt %d: ok = %v (%s), want %v", i, rep.OK, rep.Error, want)
		}
	}
}

// TestDeadlineOfOneBatchSparesAnother: a batch whose deadline passes closes
// the lanes it used; another live READ batch on the same lanes is re-sent
// and completes.
func TestDeadlineOfOneBatchSparesAnother(t *testing.T) {
	ini, tgt, seg := pair(t, TransportTCP, func(c *Config) { c.SliceSize = 64 << 10 })
	const big = 16 << 20
	// Each round's timed-out WRITE gets its own remote region: the peer may
	// still be applying its bytes after the initiator gave up on it.
	remote := make([]byte, 3*big)
	local := make([]byte, 2*big)
	_ = tgt.RegisterBytes(remote, "")
	_ = ini.RegisterBytes(local, "")
	fill(remote[:big], 41)
	fill(local[big:], 42)
	for round := 0; round < 2; round++ {
		y, err := ini.Submit(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: big}})
		if err != nil {
			t.Fatal(err)
		}
		xctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		x, err := ini.Submit(xctx, []Request{{Op: OpWrite, Local: AddrOf(local[big:]), Segment: seg, Remote: uint64(AddrOf(remote[(1+round)*big:])), Length: big}})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		xerr := x.Wait(context.Background())
		cancel()
		x.Free()
		if xerr != nil && !errors.Is(xerr, ErrTimeout) {
			t.Fatalf("x: %v", xerr)
		}
		if err := y.Wait(ctxT(t)); err != nil {
			t.Fatalf("round %d: live batch failed because another timed out: %v", round, err)
		}
		y.Free()
		if !bytes.Equal(remote[:big], local[:big]) {
			t.Fatal("live batch data differs")
		}
		clear(local[:big])
	}
}
