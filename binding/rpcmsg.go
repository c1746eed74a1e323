package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The message transport under Mooncake's engine RPC interface
// (mooncake.engine.RpcInterface: send_data / send_tensor to a server whose
// Python callback receives them). Mooncake runs it on coro_rpc; ours is a
// small framed protocol over TCP, hand-written because it is one frame type
// with a fixed header (no gRPC service or schema to generate from):
//
//	request: magic "MCRI" | kind u8 | 0 u8 | 0 u16 | length u64 (LE) | payload
//	reply:   code i32 (LE): 0 delivered, negative a Mooncake code
//
// A request is answered once its message is queued for the receiving
// process (not when its callback ran). A server holds at most rpcMaxHeld
// bytes of messages being read or queued; one that would pass it is refused
// (-900) and its connection closed, so senders cannot exhaust its memory. Connections are reused: a client keeps
// up to pool idle connections per target.

const (
	rpcMagic      = "MCRI"
	rpcHeaderLen  = 16
	rpcMaxMessage = 1 << 30 // a bigger length is refused before anything is allocated
	rpcQueueLen   = 256
	rpcMaxHeld    = 4 << 30 // bytes being read or queued per server; a message past it is refused

	rpcKindData   = 1
	rpcKindTensor = 2
)

var errRPCFrame = errors.New("bad rpc frame")

// rpcHeader is the decoded fixed header of a request.
type rpcHeader struct {
	kind   byte
	length uint64
}

// decodeRPCHeader checks a request header (exactly rpcHeaderLen bytes).
func decodeRPCHeader(b []byte) (rpcHeader, error) {
	if len(b) != rpcHeaderLen {
		return rpcHeader{}, fmt.Errorf("%w: header of %d bytes", errRPCFrame, len(b))
	}
	if string(b[:4]) != rpcMagic {
		return rpcHeader{}, fmt.Errorf("%w: bad magic %q", errRPCFrame, b[:4])
	}
	h := rpcHeader{kind: b[4], length: binary.LittleEndian.Uint64(b[8:])}
	if h.kind != rpcKindData && h.kind != rpcKindTensor {
		return rpcHeader{}, fmt.Errorf("%w: unknown kind %d", errRPCFrame, h.kind)
	}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return rpcHeader{}, fmt.Errorf("%w: reserved bytes set", errRPCFrame)
	}
	if h.length > rpcMaxMessage {
		return rpcHeader{}, fmt.Errorf("%w: message of %d bytes (limit %d)", errRPCFrame, h.length, rpcMaxMessage)
	}
	return h, nil
}

// putCode writes a Mooncake code as the 4-byte reply.
func putCode(b []byte, code int64) {
	binary.LittleEndian.PutUint32(b, uint32(int32(code)))
}

func encodeRPCHeader(kind byte, n int) []byte {
	b := make([]byte, rpcHeaderLen)
	copy(b, rpcMagic)
	b[4] = kind
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	return b
}

// rpcMsg is one received message.
type rpcMsg struct {
	kind   byte
	source string
	data   []byte
}

// encodeRPCMsg is how a message crosses the ABI to Python (mc_rpc_recv):
// kind u8 | source length u16 (LE) | source | data.
func encodeRPCMsg(m rpcMsg) []byte {
	src := m.source
	if len(src) > 0xffff {
		src = src[:0xffff]
	}
	b := make([]byte, 3+len(src)+len(m.data))
	b[0] = m.kind
	binary.LittleEndian.PutUint16(b[1:], uint16(len(src)))
	copy(b[3:], src)
	copy(b[3+len(src):], m.data)
	return b
}

// rpcServer accepts connections and queues the messages they carry.
type rpcServer struct {
	ln      net.Listener
	timeout time.Duration
	maxHeld int64
	held    atomic.Int64 // bytes of messages being read or queued
	queue   chan rpcMsg
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

// listenRPC binds addr ("host:port"; port 0 picks one; "" is refused).
func listenRPC(addr string, timeout time.Duration) (*rpcServer, error) {
	return listenRPCWith(addr, timeout, rpcMaxHeld)
}

// listenRPCWith is listenRPC with a memory budget of maxHeld bytes.
func listenRPCWith(addr string, timeout time.Duration, maxHeld int64) (*rpcServer, error) {
	if addr == "" {
		return nil, errInvalid("empty listen address")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &rpcServer{ln: ln, timeout: timeout, maxHeld: maxHeld, queue: make(chan rpcMsg, rpcQueueLen),
		done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	s.wg.Go(s.accept)
	return s, nil
}

func (s *rpcServer) port() int {
	_, p, _ := net.SplitHostPort(s.ln.Addr().String())
	n, _ := strconv.Atoi(p)
	return n
}

func (s *rpcServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		select {
		case <-s.done:
			s.mu.Unlock()
			c.Close()
			return
		default:
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() { s.serve(c) })
	}
}

// serve reads the requests of one connection until it fails or closes.
func (s *rpcServer) serve(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	src := c.RemoteAddr().String()
	hdr := make([]byte, rpcHeaderLen)
	reply := make([]byte, 4)
	for {
		c.SetReadDeadline(time.Time{}) // idle between requests
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		h, err := decodeRPCHeader(hdr)
		if err != nil {
			logger.Warn("rpc: dropping connection", "peer", src, "err", err)
			putCode(reply, codeInvalidParams)
			c.Write(reply)
			return
		}
		n := int64(h.length)
		if s.held.Add(n) > s.maxHeld {
			s.held.Add(-n)
			logger.Warn("rpc: refusing a message: the receiver holds too many bytes", "peer", src, "bytes", n)
			putCode(reply, codeRPCFail)
			c.Write(reply)
			return
		}
		c.SetReadDeadline(time.Now().Add(s.timeout + time.Duration(h.length)))
		data := make([]byte, h.length)
		if _, err := io.ReadFull(c, data); err != nil {
			s.held.Add(-n)
			return
		}
		code := int64(codeOK)
		t := time.NewTimer(s.timeout)
		select {
		case s.queue <- rpcMsg{kind: h.kind, source: src, data: data}:
		case <-s.done:
			code = codeInternal
		case <-t.C:
			code = codeRPCTimeout // the receiving process does not drain its queue
		}
		t.Stop()
		if code != codeOK {
			s.held.Add(-n)
		}
		putCode(reply, code)
		c.SetWriteDeadline(time.Now().Add(s.timeout))
		if _, err := c.Write(reply); err != nil || code != codeOK {
			return
		}
	}
}

// recv waits up to wait for the next message; ok is false when none came.
func (s *rpcServer) recv(wait time.Duration) (rpcMsg, bool, error) {
	select {
	case m := <-s.queue:
		s.held.Add(-int64(len(m.data)))
		return m, true, nil
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case m := <-s.queue:
		s.held.Add(-int64(len(m.data)))
		return m, true, nil
	case <-s.done:
		return rpcMsg{}, false, errBadHandle
	case <-t.C:
		return rpcMsg{}, false, nil
	}
}

// close stops accepting, drops every connection and waits for their
// goroutines; queued messages are discarded.
func (s *rpcServer) close() error {
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		close(s.done)
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		err = s.ln.Close()
		s.wg.Wait()
	})
	return err
}

// rpcClient sends messages, keeping idle connections per target.
type rpcClient struct {
	timeout time.Duration
	pool    int
	mu      sync.Mutex
	idle    map[string][]net.Conn
	closed  bool
}

func newRPCClient(pool int, timeout time.Duration) *rpcClient {
	return &rpcClient{timeout: timeout, pool: max(1, pool), idle: map[string][]net.Conn{}}
}

func (c *rpcClient) take(target string) net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.idle[target]
	if len(l) == 0 {
		return nil
	}
	conn := l[len(l)-1]
	c.idle[target] = l[:len(l)-1]
	return conn
}

func (c *rpcClient) put(target string, conn net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle[target]) >= c.pool {
		conn.Close()
		return
	}
	c.idle[target] = append(c.idle[target], conn)
}

// send delivers one message to target ("host:port"). A reused connection
// the server has since closed is retried once on a new one.
func (c *rpcClient) send(target string, kind byte, data []byte) error {
	if target == "" {
		return errInvalid("empty target address")
	}
	if len(data) > rpcMaxMessage {
		return errInvalid(fmt.Sprintf("message of %d bytes (limit %d)", len(data), rpcMaxMessage))
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return errBadHandle
	}
	if conn := c.take(target); conn != nil {
		code, err := c.exchange(conn, kind, data)
		if err == nil {
			return c.finish(target, conn, code)
		}
		conn.Close() // stale: fall through to a fresh connection
	}
	conn, err := net.DialTimeout("tcp", target, c.timeout)
	if err != nil {
		return fmt.Errorf("%w: dial %s: %v", errRPC, target, err)
	}
	code, err := c.exchange(conn, kind, data)
	if err != nil {
		conn.Close()
		return fmt.Errorf("%w: %s: %v", errRPC, target, err)
	}
	return c.finish(target, conn, code)
}

var errRPC = errors.New("rpc send failed")

func init() { codeTable = append(codeTable, codeMapping{errRPC, codeRPCFail}) }

func (c *rpcClient) finish(target string, conn net.Conn, code int32) error {
	if code != codeOK {
		conn.Close()
		return fmt.Errorf("%w: %s answered %d", errRPC, target, code)
	}
	c.put(target, conn)
	return nil
}

func (c *rpcClient) exchange(conn net.Conn, kind byte, data []byte) (int32, error) {
	conn.SetDeadline(time.Now().Add(c.timeout + time.Duration(len(data))))
	bufs := net.Buffers{encodeRPCHeader(kind, len(data)), data}
	if _, err := bufs.WriteTo(conn); err != nil {
		return 0, err
	}
	var reply [4]byte
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		return 0, err
	}
	return int32(binary.LittleEndian.Uint32(reply[:])), nil
}

func (c *rpcClient) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for t, l := range c.idle {
		for _, conn := range l {
			conn.Close()
		}
		delete(c.idle, t)
	}
	return nil
}
