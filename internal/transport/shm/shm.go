package shm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/wire"
)

// MaxMsg bounds one protocol message.
const MaxMsg = 4096

// Errors.
var (
	ErrNotShareable = errors.New("buffer not shareable")
	ErrOutOfBounds  = errors.New("range outside the shared buffer")
	ErrAuth         = errors.New("shm: authentication failed")
	ErrClosed       = errors.New("shm: closed")
)

// Msg is one protocol message, in either direction.
type Msg struct {
	Auth   *wire.Auth `json:"auth,omitempty"`
	Map    uint64     `json:"map,omitempty"`    // request: the buffer containing this address
	Buf    *BufInfo   `json:"buf,omitempty"`    // reply to Map; the memfd rides along
	Revoke uint64     `json:"revoke,omitempty"` // push: buffer id no longer shared
	OK     bool       `json:"ok,omitempty"`
	Err    string     `json:"err,omitempty"`
}

// BufInfo describes a shared buffer.
type BufInfo struct {
	Addr   uint64 `json:"addr"`
	Length uint64 `json:"length"`
	ID     uint64 `json:"id"`
}

// DecodeMsg parses and validates a message.
func DecodeMsg(b []byte) (Msg, error) {
	if len(b) > MaxMsg {
		return Msg{}, fmt.Errorf("shm: message of %d bytes: %w", len(b), wire.ErrFrameTooLarge)
	}
	var m Msg
	if err := json.Unmarshal(b, &m); err != nil {
		return Msg{}, fmt.Errorf("shm: %w: %v", wire.ErrBadFrame, err)
	}
	if m.Buf != nil && (m.Buf.Length == 0 || m.Buf.Addr == 0 || m.Buf.Addr+m.Buf.Length < m.Buf.Addr || m.Buf.Length > 1<<46) {
		return Msg{}, fmt.Errorf("shm: %w: buffer %+v", wire.ErrBadFrame, *m.Buf)
	}
	if m.Auth != nil && (len(m.Auth.Nonce) > 64 || len(m.Auth.MAC) > 64) {
		return Msg{}, fmt.Errorf("shm: %w: auth", wire.ErrBadFrame)
	}
	return m, nil
}

// Alloc creates a memfd of n bytes and maps it shared.
func Alloc(n int) (fd int, data []byte, err error) {
	fd, err = unix.MemfdCreate("mooncake-go", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		_ = unix.Close(fd)
		return -1, nil, fmt.Errorf("ftruncate memfd: %w", err)
	}
	data, err = unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Close(fd)
		return -1, nil, fmt.Errorf("mmap memfd: %w", err)
	}
	return fd, data, nil
}

// Resident counts the bytes of b (a mapping) whose pages are in memory, per
// mincore(2). For a mapping of a memfd that is the memory the file holds
// in that range, whether or not this mapping has touched it.
func Resident(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	const page = 4096
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := base &^ (page - 1)
	vec := make([]byte, (base+uintptr(len(b))-lo+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, lo, base+uintptr(len(b))-lo, uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); e != 0 {
		return 0, fmt.Errorf("mincore: %w", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n * page, nil
}

// DataRanges returns the parts of the first size bytes of a memfd that hold
// data, as [start, end) offsets in order (SEEK_DATA and SEEK_HOLE, page
// granular). The rest has never been written (or was punched out) and
// reads as zeros; reading it through a mapping would allocate its pages,
// reading only these does not. Pages swapped out count as data.
func DataRanges(fd int, size int64) ([][2]int64, error) {
	var out [][2]int64
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // no data past off
			break
		}
		if err != nil {
			return nil, fmt.Errorf("seek data: %w", err)
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("seek hole: %w", err)
		}
		end = min(end, size)
		out = append(out, [2]int64{start, end})
		off = end
	}
	return out, nil
}

// Free unmaps and closes what Alloc returned.
func Free(fd int, data []byte) {
	_ = unix.Munmap(data)
	_ = unix.Close(fd)
}

// Lookup finds the shareable buffer containing addr and returns a dup of its
// memfd (the server closes it after sending).
type Lookup func(addr uint64) (BufInfo, int, error)

// Server hands out memfds of shareable buffers to same-host peers.
type Server struct {
	ln     *net.UnixListener
	lookup Lookup
	auth   func(*wire.Auth) bool
	log    *slog.Logger
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[*net.UnixConn]*sync.Mutex // conn -> write lock
	closed bool
}

// Listen starts a server on a fresh abstract unix socket.
func Listen(name string, lookup Lookup, auth func(*wire.Auth) bool, log *slog.Logger) (*Server, error) {
	addr := &net.UnixAddr{Name: "@" + name, Net: "unixpacket"}
	ln, err := net.ListenUnix("unixpacket", addr)
	if err != nil {
		return nil, fmt.Errorf("shm: listen: %w", err)
	}
	s := &Server{ln: ln, lookup: lookup, auth: auth, log: log, conns: map[*net.UnixConn]*sync.Mutex{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Path is the socket address peers dial.
func (s *Server) Path() string { return s.ln.Addr().String() }

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		wmu := &sync.Mutex{}
		s.conns[c] = wmu
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c, wmu)
	}
}

func (s *Server) serve(c *net.UnixConn, wmu *sync.Mutex) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	buf := make([]byte, MaxMsg+1)
	send := func(m Msg, fd int) error {
		b, _ := json.Marshal(m)
		var oob []byte
		if fd >= 0 {
			oob = unix.UnixRights(fd)
		}
		wmu.Lock()
		defer wmu.Unlock()
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _, err := c.WriteMsgUnix(b, oob, nil)
		return err
	}
	authed := false
	for {
		n, _, _, _, err := c.ReadMsgUnix(buf, nil)
		if err != nil {
			return
		}
		m, err := DecodeMsg(buf[:n])
		if err != nil {
			s.log.Debug("shm: bad message", "err", err)
			_ = send(Msg{Err: err.Error()}, -1)
			return
		}
		if !authed {
			if !s.auth(m.Auth) {
				_ = send(Msg{Err: ErrAuth.Error()}, -1)
				return
			}
			authed = true
		}
		if m.Map == 0 {
			if err := send(Msg{OK: true}, -1); err != nil {
				return
			}
			continue
		}
		info, fd, err := s.lookup(m.Map)
		if err != nil {
			if err := send(Msg{Err: err.Error()}, -1); err != nil {
				return
			}
			continue
		}
		err = send(Msg{OK: true, Buf: &info}, fd)
		_ = unix.Close(fd)
		if err != nil {
			return
		}
	}
}

// Revoke tells every client that buffer id is no longer shared.
func (s *Server) Revoke(id uint64) {
	b, _ := json.Marshal(Msg{Revoke: id})
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, wmu := range s.conns {
		wmu.Lock()
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _, _ = c.WriteMsgUnix(b, nil, nil)
		wmu.Unlock()
	}
}

// Close stops the server and waits for its goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	_ = s.ln.Close()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Mapping is a peer's buffer mapped into this process.
type Mapping struct {
	Info BufInfo
	data []byte
	// populated has a bit per chunk of data whose page tables a span
	// filled already (populate).
	populated []atomic.Uint64
	refs      atomic.Int64
	gone      atomic.Bool
	unmapO    sync.Once
}

func (m *Mapping) release() {
	if m.refs.Add(-1) == 0 && m.gone.Load() {
		m.unmap()
	}
}

func (m *Mapping) unmap() { m.unmapO.Do(func() { _ = unix.Munmap(m.data) }) }

// Span is a checked view into a mapping; Release it after copying.
type Span struct {
	B []byte
	m *Mapping
}

// Release ends the use of the span.
func (s Span) Release() {
	if s.m != nil {
		s.m.release()
	}
}

// Client is one connection to a same-host peer's Server.
type Client struct {
	c       *net.UnixConn
	opt     DialOptions
	replies chan reply
	reqMu   sync.Mutex // one Map request at a time
	wg      sync.WaitGroup

	mu     sync.Mutex
	maps   map[uint64]*Mapping // by base address
	byID   map[uint64]*Mapping
	closed bool
	err    error
}

type reply struct {
	m  Msg
	fd int
}

// Dial connects to a peer's server and authenticates.
func Dial(ctx context.Context, path string, auth *wire.Auth, opt DialOptions) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("shm: dial %s: %w", path, err)
	}
	cl := &Client{c: nc.(*net.UnixConn), opt: opt, replies: make(chan reply, 1), maps: map[uint64]*Mapping{}, byID: map[uint64]*Mapping{}}
	cl.wg.Add(1)
	go cl.reader()
	r, err := cl.roundTrip(ctx, Msg{Auth: auth})
	if err == nil && !r.m.OK {
		err = errors.New(r.m.Err)
		if r.m.Err == ErrAuth.Error() {
			err = ErrAuth
		}
	}
	if err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

func (cl *Client) reader() {
	defer cl.wg.Done()
	buf := make([]byte, MaxMsg+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	defer close(cl.replies)
	for {
		n, oobn, _, _, err := cl.c.ReadMsgUnix(buf, oob)
		if err != nil {
			cl.fail(fmt.Errorf("shm: connection lost: %w", err))
			return
		}
		fd := -1
		if oobn > 0 {
			if scms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, scm := range scms {
					if fds, err := unix.ParseUnixRights(&scm); err == nil {
						for _, f := range fds {
							if fd < 0 {
								fd = f
							} else {
								_ = unix.Close(f)
							}
						}
					}
				}
			}
		}
		m, err := DecodeMsg(buf[:n])
		if err != nil {
			if fd >= 0 {
				_ = unix.Close(fd)
			}
			cl.fail(err)
			return
		}
		if m.Revoke != 0 {
			if fd >= 0 {
				_ = unix.Close(fd)
			}
			cl.revoke(m.Revoke)
			continue
		}
		select {
		case cl.replies <- reply{m: m, fd: fd}:
		default: // nobody asked: protocol error
			if fd >= 0 {
				_ = unix.Close(fd)
			}
			cl.fail(fmt.Errorf("shm: %w: unsolicited reply", wire.ErrBadFrame))
			return
		}
	}
}

func (cl *Client) fail(err error) {
	cl.mu.Lock()
	if cl.err == nil {
		cl.err = err
	}
	cl.mu.Unlock()
	_ = cl.c.Close()
}

func (cl *Client) roundTrip(ctx context.Context, m Msg) (reply, error) {
	b, _ := json.Marshal(m)
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(5 * time.Second)
	}
	_ = cl.c.SetWriteDeadline(dl)
	if _, _, err := cl.c.WriteMsgUnix(b, nil, nil); err != nil {
		return reply{}, fmt.Errorf("shm: send: %w", err)
	}
	t := time.NewTimer(time.Until(dl))
	defer t.Stop()
	select {
	case r, ok := <-cl.replies:
		if !ok {
			return reply{}, cl.Err()
		}
		return r, nil
	case <-t.C:
		cl.fail(errors.New("shm: reply timed out"))
		return reply{}, context.DeadlineExceeded
	}
}

// Err is why the client stopped working (nil while healthy).
func (cl *Client) Err() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.err == nil && cl.closed {
		return ErrClosed
	}
	return cl.err
}

func (cl *Client) revoke(id uint64) {
	cl.mu.Lock()
	m := cl.byID[id]
	if m != nil {
		delete(cl.byID, id)
		delete(cl.maps, m.Info.Addr)
	}
	cl.mu.Unlock()
	if m != nil {
		m.gone.Store(true)
		if m.refs.Load() == 0 {
			m.unmap()
		}
	}
}

// Acquire returns the peer's [addr, addr+n) through a mapping of the buffer
// whose base is base (mapping it first if needed).
func (cl *Client) Acquire(ctx context.Context, base, addr, n uint64) (Span, error) {
	cl.mu.Lock()
	if cl.closed || cl.err != nil {
		cl.mu.Unlock()
		return Span{}, errors.Join(ErrClosed, cl.err)
	}
	m := cl.maps[base]
	if m != nil {
		m.refs.Add(1)
	}
	cl.mu.Unlock()
	if m == nil {
		var err error
		if m, err = cl.mapBuf(ctx, base); err != nil {
			return Span{}, err
		}
	}
	if !m.holds(addr, n) {
		m.release()
		return Span{}, fmt.Errorf("shm: %#x+%d: %w", addr, n, ErrOutOfBounds)
	}
	return m.span(addr, n), nil
}

// AcquireMapped is Acquire when the buffer whose base is base is mapped
// already and [addr, addr+n) lies inside it; ok is false otherwise (call
// Acquire, which maps the buffer or names the error). It makes no round
// trip to the peer.
func (cl *Client) AcquireMapped(base, addr, n uint64) (sp Span, ok bool) {
	cl.mu.Lock()
	m := cl.maps[base]
	if cl.closed || cl.err != nil || m == nil || !m.holds(addr, n) {
		cl.mu.Unlock()
		return Span{}, false
	}
	m.refs.Add(1)
	cl.mu.Unlock()
	return m.span(addr, n), true
}

// holds reports whether [addr, addr+n) is a non-empty range inside m.
func (m *Mapping) holds(addr, n uint64) bool {
	return n > 0 && addr >= m.Info.Addr && addr+n >= addr && addr+n <= m.Info.Addr+m.Info.Length
}

// span is m's [addr, addr+n), which m holds, with a reference the caller took.
func (m *Mapping) span(addr, n uint64) Span {
	off := addr - m.Info.Addr
	if n >= spanPopulateMin {
		m.populate(off, n)
	}
	return Span{B: m.data[off : off+n : off+n], m: m}
}

// chunk is the granularity at which a mapping's pages are populated.
const chunk = 64 << 10

// populate fills the page tables under the chunks of m that [off, off+n)
// touches and that no earlier span populated (MADV_POPULATE_READ: read
// faults, which on shared memory map the pages writable and fault in 16
// at a time), so the copy that follows takes no fault per page. On a
// memfd a fault on a hole allocates the page, a read fault too: what
// this allocates beyond the copy is bounded by a chunk at either end.
// Kernels without MADV_POPULATE_READ (before 5.14) answer EINVAL: copies
// fault page by page there.
func (m *Mapping) populate(off, n uint64) {
	lo, hi := off/chunk, (off+n-1)/chunk
	all := true
	for c := lo; c <= hi && all; c++ {
		all = m.populated[c/64].Load()&(1<<(c%64)) != 0
	}
	if all || noPopulateRead.Load() {
		return
	}
	end := min((hi+1)*chunk, uint64(len(m.data)))
	if err := unix.Madvise(m.data[lo*chunk:end], unix.MADV_POPULATE_READ); err != nil {
		if errors.Is(err, unix.EINVAL) {
			noPopulateRead.Store(true)
		}
		return
	}
	for c := lo; c <= hi; c++ {
		m.populated[c/64].Or(1 << (c % 64))
	}
}

// spanPopulateMin: a span at least this long is populated when it is
// handed out (see the package doc for the figures behind the policy); a
// shorter one faults on each page it touches, at most 17. A variable so
// that the tests and benchmarks can compare policies.
var spanPopulateMin uint64 = chunk

// DialOptions tune a Client.
type DialOptions struct {
	// PopulateWhole maps peers' buffers with MAP_POPULATE, the whole buffer
	// at once, instead of lazily (the default; see the package doc). It
	// exists for benchmarks that compare the two policies.
	PopulateWhole bool
}

// noPopulateRead: the kernel lacks MADV_POPULATE_READ.
var noPopulateRead atomic.Bool

func (cl *Client) mapBuf(ctx context.Context, base uint64) (*Mapping, error) {
	cl.reqMu.Lock()
	defer cl.reqMu.Unlock()
	cl.mu.Lock()
	if m := cl.maps[base]; m != nil {
		m.refs.Add(1)
		cl.mu.Unlock()
		return m, nil
	}
	cl.mu.Unlock()
	r, err := cl.roundTrip(ctx, Msg{Map: base})
	if err != nil {
		return nil, err
	}
	if !r.m.OK || r.m.Buf == nil || r.fd < 0 {
		if r.fd >= 0 {
			_ = unix.Close(r.fd)
		}
		return nil, fmt.Errorf("shm: map %#x: %w: %s", base, ErrNotShareable, r.m.Err)
	}
	defer unix.Close(r.fd)
	var st unix.Stat_t
	if err := unix.Fstat(r.fd, &st); err != nil || uint64(st.Size) < r.m.Buf.Length {
		return nil, fmt.Errorf("shm: map %#x: memfd smaller than announced", base)
	}
	// Mapped lazily, never MAP_POPULATE: populating the whole buffer costs
	// time in proportion to its size and allocates every page of the
	// owner's memfd that is still a hole. Spans are populated as they are
	// handed out (populate).
	flags := unix.MAP_SHARED
	if cl.opt.PopulateWhole {
		flags |= unix.MAP_POPULATE
	}
	data, err := unix.Mmap(r.fd, 0, int(r.m.Buf.Length), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap: %w", err)
	}
	m := &Mapping{Info: *r.m.Buf, data: data, populated: make([]atomic.Uint64, (r.m.Buf.Length+64*chunk-1)/(64*chunk))}
	m.refs.Store(1)
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		m.unmap()
		return nil, ErrClosed
	}
	cl.maps[m.Info.Addr] = m
	cl.byID[m.Info.ID] = m
	cl.mu.Unlock()
	return m, nil
}

// Close drops the connection and every mapping (after their copies end).
func (cl *Client) Close() {
	cl.mu.Lock()
	cl.closed = true
	maps := cl.maps
	cl.maps, cl.byID = map[uint64]*Mapping{}, map[uint64]*Mapping{}
	cl.mu.Unlock()
	_ = cl.c.Close()
	cl.wg.Wait()
	for _, m := range maps {
		m.gone.Store(true)
		if m.refs.Load() == 0 {
			m.unmap()
		}
	}
}
