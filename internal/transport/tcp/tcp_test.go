package tcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// laneServer serves raw lanes (no handshake) over loopback.
type laneServer struct {
	ln  net.Listener
	reg *registry.Registry
	wg  sync.WaitGroup
	mu  sync.Mutex
	cs  []net.Conn
}

func startServer(t *testing.T, reg *registry.Registry) *laneServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &laneServer{ln: ln, reg: reg}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.cs = append(s.cs, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				_ = ServeLane(c, bufio.NewReader(c), reg, ServerConfig{MaxSlice: 1 << 20, Bulk: make(chan struct{}, 1), BulkMin: 64 << 10})
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *laneServer) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for _, c := range s.cs {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *laneServer) dial(ctx context.Context, _ int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", s.ln.Addr().String())
}

type collector struct {
	mu   sync.Mutex
	errs map[int]error
	done chan int
}

func newCollector() *collector { return &collector{errs: map[int]error{}, done: make(chan int, 4096)} }

func (c *collector) OpDone(op *Op, err error) {
	c.mu.Lock()
	c.errs[op.Tag] = err
	c.mu.Unlock()
	c.done <- op.Tag
}

func (c *collector) wait(t *testing.T, n int) map[int]error {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for range n {
		select {
		case <-c.done:
		case <-timeout:
			t.Fatal("ops did not complete")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errs
}

func TestPipelinedMixedOps(t *testing.T) {
	reg := registry.New()
	remote := make([]byte, 4<<20)
	if _, err := reg.Register(remote, "", false); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := DialPeer(ctx, PeerConfig{Lanes: 2, Checksum: true, MaxSlice: 1 << 20, Bulk: make(chan struct{}, 1)}, s.dial)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	local := make([]byte, 4<<20)
	for i := range local {
		local[i] = byte(i * 7)
	}
	base := registry.AddrOf(remote)
	col := newCollector()
	sizes := []int{1, 100, 4096, 65536, 65537, 1 << 20}
	var ops []*Op
	off := 0
	for i := 0; off < 3<<20; i++ {
		n := sizes[i%len(sizes)]
		ops = append(ops, &Op{Write: true, Remote: base + uint64(off), Buf: local[off : off+n], Done: col, Tag: i})
		off += n
	}
	// One rejected op in the middle must not disturb the others.
	bad := &Op{Write: true, Remote: base + uint64(len(remote)) - 10, Buf: local[:20], Done: col, Tag: len(ops)}
	ops = append(ops[:3], append([]*Op{bad}, ops[3:]...)...)
	for _, op := range ops {
		if err := p.Enqueue(op); err != nil {
			t.Fatal(err)
		}
	}
	errs := col.wait(t, len(ops))
	for tag, err := range errs {
		if tag == bad.Tag {
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("bad op: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("op %d: %v", tag, err)
		}
	}
	if !bytes.Equal(remote[:off], local[:off]) {
		t.Fatal("remote differs after writes")
	}
	// Read it all back in one go, in slices.
	back := make([]byte, off)
	col = newCollector()
	n := 0
	for o := 0; o < off; o += 1 << 20 {
		end := min(o+1<<20, off)
		if err := p.Enqueue(&Op{Remote: base + uint64(o), Buf: back[o:end], Done: col, Tag: n}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	for tag, err := range col.wait(t, n) {
		if err != nil {
			t.Fatalf("read %d: %v", tag, err)
		}
	}
	if !bytes.Equal(back, local[:off]) {
		t.Fatal("read back differs")
	}
	if err := p.Enqueue(&Op{Remote: base, Buf: make([]byte, 2<<20), Done: col}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("oversized slice: %v", err)
	}
}

func TestLaneFailureCompletesEverything(t *testing.T) {
	reg := registry.New()
	remote := make([]byte, 1<<20)
	_, _ = reg.Register(remote, "", false)
	s := startServer(t, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := DialPeer(ctx, PeerConfig{Lanes: 1}, s.dial)
	if err != nil {
		t.Fatal(err)
	}
	local := make([]byte, 1<<20)
	col := newCollector()
	const n = 200
	for i := range n {
		// distinct ranges: lanes run concurrently
		if err := p.Enqueue(&Op{Write: true, Remote: registry.AddrOf(remote) + uint64(i*4096), Buf: local[i*4096 : (i+1)*4096], Done: col, Tag: i}); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("boom")
	p.Fail(boom)
	errs := col.wait(t, n)
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if !errors.Is(err, boom) && !errors.Is(err, ErrPeerDown) {
				t.Fatalf("err = %v", err)
			}
		}
	}
	if p.Alive() {
		t.Fatal("peer alive after Fail")
	}
	if err := p.Enqueue(&Op{Write: true, Remote: registry.AddrOf(remote), Buf: local[:10], Done: col}); err == nil {
		t.Fatal("enqueue on a failed peer accepted")
	}
	p.Wait()
	t.Logf("%d of %d ops failed by Fail", failed, n)
}

func TestServerSendsGarbage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 2 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			// Wrong response id for whatever arrives.
			var rh [wire.RespHeaderSize]byte
			(&wire.RespHeader{ID: 999}).Put(rh[:])
			go func() { _, _ = c.Write(rh[:]) }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var d net.Dialer
	p, err := DialPeer(ctx, PeerConfig{Lanes: 1}, func(ctx context.Context, _ int) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	})
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	pending := 0
	for i, n := range []int{8, 1 << 17} {
		// The garbage may have killed the lane already: then Enqueue fails.
		if err := p.Enqueue(&Op{Write: true, Remote: 4096, Buf: make([]byte, n), Done: col, Tag: i}); err == nil {
			pending++
		} else if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrPeerDown) {
			t.Fatalf("enqueue: %v", err)
		}
	}
	for _, err := range col.wait(t, pending) {
		if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrPeerDown) {
			t.Fatalf("err = %v", err)
		}
	}
	p.Close()
	wg.Wait()
}

// fakeConn feeds ServeLane from a byte slice.
type fakeConn struct {
	r *bytes.Reader
	w bytes.Buffer
}

func (f *fakeConn) Read(b []byte) (int, error)       { return f.r.Read(b) }
func (f *fakeConn) Write(b []byte) (int, error)      { return f.w.Write(b) }
func (f *fakeConn) Close() error                     { return nil }
func (f *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (f *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (f *fakeConn) SetDeadline(time.Time) error      { return nil }
func (f *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fakeConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzServeLane: arbitrary bytes on a lane never touch memory outside the
// registered buffer and never make the server answer with a bad header.
func FuzzServeLane(f *testing.F) {
	backing := make([]byte, 3*4096)
	reg := registry.New()
	buf := backing[4096 : 2*4096 : 2*4096]
	if _, err := reg.Register(buf, "", false); err != nil {
		f.Fatal(err)
	}
	base := registry.AddrOf(buf)
	seed := func(hs ...wire.ReqHeader) []byte {
		var out []byte
		for _, h := range hs {
			b := make([]byte, wire.ReqHeaderSize)
			h.Put(b)
			out = append(out, b...)
			if h.Op == wire.OpWrite {
				out = append(out, bytes.Repeat([]byte{0xAB}, int(min(h.Length, 5000)))...)
			}
		}
		return out
	}
	f.Add(seed(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: base, Length: 16}))
	f.Add(seed(wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: base + 4000, Length: 200}))
	f.Add(seed(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: base - 8, Length: 16}, wire.ReqHeader{Op: wire.OpRead, ID: 2, Addr: base, Length: 8}))
	f.Add(seed(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: base + 4090, Length: 4096}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		for i := range backing {
			backing[i] = 0
		}
		c := &fakeConn{r: bytes.NewReader(in)}
		_ = ServeLane(c, bufio.NewReader(c), reg, ServerConfig{MaxSlice: 8192})
		for i, b := range backing {
			if (i < 4096 || i >= 2*4096) && b != 0 {
				t.Fatalf("byte %d outside the registered buffer was written", i)
			}
		}
		checkResponses(t, c.w.Bytes())
	})
}

// checkResponses walks a server's output as response headers, each OK
// READ followed by its payload, and fails on a bad header, a short payload
// or trailing bytes; it returns the headers.
func checkResponses(t *testing.T, out []byte) []wire.RespHeader {
	t.Helper()
	var hs []wire.RespHeader
	for len(out) >= wire.RespHeaderSize {
		h, err := wire.DecodeRespHeader(out, 8192)
		if err != nil {
			t.Fatalf("server sent a bad header: %v", err)
		}
		hs = append(hs, h)
		out = out[wire.RespHeaderSize:]
		if h.Status == wire.StatusOK && h.Length > 0 {
			if uint64(len(out)) < h.Length {
				t.Fatal("short read payload")
			}
			out = out[h.Length:]
		}
	}
	if len(out) != 0 {
		t.Fatalf("%d trailing bytes in server output", len(out))
	}
	return hs
}
