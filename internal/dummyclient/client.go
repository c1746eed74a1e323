package dummyclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/store"
)

// ErrNoRealClient is returned by Dial when no real client serves the address.
var ErrNoRealClient = errors.New("dummyclient: no real client at this address")

// Client is a dummy client: every call is served by the real client, and
// buffers inside Pool() move without a copy. Safe for concurrent use
// (requests are sent one at a time).
type Client struct {
	conn    *net.UnixConn
	segment string

	mu  sync.Mutex // one request at a time
	r   *bufio.Reader
	w   *bufio.Writer
	err error // the connection broke

	pool  []byte
	amu   sync.Mutex
	alloc uint64 // bump allocator over pool
}

// Dial attaches to the real client serving addr with a shared pool of
// poolSize bytes.
func Dial(ctx context.Context, addr string, poolSize uint64) (*Client, error) {
	if poolSize == 0 {
		return nil, fmt.Errorf("dummyclient: pool size 0: %w", store.ErrInvalid)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", SocketName(addr))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoRealClient, addr, err)
	}
	c := &Client{conn: nc.(*net.UnixConn)}
	allow, err := ParseUIDs(os.Getenv(RealClientUIDsEnv))
	if err == nil {
		err = checkPeer(c.conn, allow)
	}
	if err != nil {
		_ = c.conn.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrNoRealClient, addr, err)
	}
	c.r = bufio.NewReaderSize(c.conn, 256<<10)
	c.w = bufio.NewWriterSize(c.conn, 256<<10)
	stop := context.AfterFunc(ctx, func() { _ = c.conn.Close() })
	defer stop()
	if err := writeFrame(c.w, request{Op: "attach", Pool: poolSize}, nil); err != nil {
		return nil, c.fail(err)
	}
	if err := c.w.Flush(); err != nil {
		return nil, c.fail(err)
	}
	// One byte first ('A' with the pool's descriptor, 'E' without), read on
	// its own so that its descriptor is not lost to a buffered read; then the reply.
	b := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.conn.ReadMsgUnix(b, oob)
	if err != nil {
		return nil, c.fail(err)
	}
	fd := -1
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil && len(msgs) == 1 {
		if fds, perr := unix.ParseUnixRights(&msgs[0]); perr == nil && len(fds) == 1 {
			fd = fds[0]
		}
	}
	var rep reply
	if _, err := readFrame(c.r, &rep, nil); err != nil {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		return nil, c.fail(err)
	}
	if rep.Err != nil || b[0] != 'A' || fd < 0 {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		_ = c.conn.Close()
		if rep.Err != nil {
			return nil, fromWire(rep.Err)
		}
		return nil, errors.New("dummyclient: attach: no pool descriptor from the real client")
	}
	mem, err := unix.Mmap(fd, 0, int(poolSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	_ = unix.Close(fd)
	if err != nil {
		return nil, c.fail(fmt.Errorf("dummyclient: mmap pool: %w", err))
	}
	c.pool = mem
	c.segment = rep.Segment
	return c, nil
}

func (c *Client) fail(err error) error {
	_ = c.conn.Close()
	return fmt.Errorf("dummyclient: %w", err)
}

// Close detaches; the real client frees the pool.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = store.ErrClosed
	}
	err := c.conn.Close()
	if c.pool != nil {
		_ = unix.Munmap(c.pool)
		c.pool = nil
	}
	return err
}

// Pool is the shared memory (valid until Close).
func (c *Client) Pool() []byte { return c.pool }

// Alloc hands out n bytes of the pool (64-byte aligned); nil when it is used up.
func (c *Client) Alloc(n uint64) []byte {
	c.amu.Lock()
	defer c.amu.Unlock()
	off := (c.alloc + 63) &^ 63
	if n == 0 || off > uint64(len(c.pool)) || n > uint64(len(c.pool))-off {
		return nil
	}
	c.alloc = off + n
	return c.pool[off : off+n : off+n]
}

// inPool is b's offset in the pool, when b lies inside it.
func (c *Client) inPool(b []byte) (uint64, bool) {
	if len(b) == 0 || len(c.pool) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(c.pool)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p+uintptr(len(b)) > base+uintptr(len(c.pool)) {
		return 0, false
	}
	return uint64(p - base), true
}

// call sends one request and reads its reply (inline data into dst when it fits).
func (c *Client) call(ctx context.Context, q request, data, dst []byte) (reply, []byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return reply{}, nil, c.err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.Close() })
	defer stop()
	var rep reply
	err := writeFrame(c.w, q, data)
	if err == nil {
		err = c.w.Flush()
	}
	var out []byte
	if err == nil {
		out, err = readFrame(c.r, &rep, dst)
	}
	if err != nil {
		c.err = fmt.Errorf("dummyclient: connection to the real client: %v: %w", err, store.ErrClosed)
		_ = c.conn.Close()
		return reply{}, nil, c.err
	}
	return rep, out, fromWire(rep.Err)
}

// SegmentName is the real client's segment.
func (c *Client) SegmentName() string { return c.segment }

// Segment is nil: a dummy contributes no memory of its own.
func (c *Client) Segment() []byte { return nil }

// PutWith stores value (sent inline unless it lies in the pool).
func (c *Client) PutWith(ctx context.Context, key string, value []byte, o store.PutOptions) error {
	return c.PutFrom(ctx, key, value, o)
}

// PutFrom stores src: by offset when it lies in the pool, else inline.
func (c *Client) PutFrom(ctx context.Context, key string, src []byte, o store.PutOptions) error {
	q := request{Op: "put", Key: key, Opts: o}
	if off, ok := c.inPool(src); ok {
		q.InPool, q.Off, q.Len = true, off, uint64(len(src))
		_, _, err := c.call(ctx, q, nil, nil)
		return err
	}
	_, _, err := c.call(ctx, q, src, nil)
	return err
}

// Get returns the value.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	_, out, err := c.call(ctx, request{Op: "get", Key: key}, nil, nil)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetInto reads the value into dst: in place when dst lies in the pool,
// else through the reply.
func (c *Client) GetInto(ctx context.Context, key string, dst []byte) (int, error) {
	if off, ok := c.inPool(dst); ok {
		rep, _, err := c.call(ctx, request{Op: "get_into", Key: key, Off: off, Len: uint64(len(dst))}, nil, nil)
		return int(rep.N), err
	}
	_, out, err := c.call(ctx, request{Op: "get", Key: key}, nil, dst)
	if err != nil {
		return 0, err
	}
	if len(out) > len(dst) {
		return 0, fmt.Errorf("get %q: value of %d bytes, buffer of %d: %w", key, len(out), len(dst), store.ErrBufferTooSmall)
	}
	if len(out) > 0 && unsafe.SliceData(out) != unsafe.SliceData(dst) {
		copy(dst, out)
	}
	return len(out), nil
}

// RegisterBuffer accepts any memory: pool memory moves in place, other
// memory through the socket.
func (c *Client) RegisterBuffer(b []byte) error { return nil }

// UnregisterBuffer undoes RegisterBuffer.
func (c *Client) UnregisterBuffer(b []byte) error { return nil }

// Exist reports whether key is stored.
func (c *Client) Exist(ctx context.Context, key string) (bool, error) {
	rep, _, err := c.call(ctx, request{Op: "exist", Key: key}, nil, nil)
	if err != nil || len(rep.Bools) != 1 {
		return false, errors.Join(err, badReply(err, len(rep.Bools) != 1))
	}
	return rep.Bools[0], nil
}

// BatchExist reports, per key, whether it is stored.
func (c *Client) BatchExist(ctx context.Context, keys []string) ([]bool, error) {
	rep, _, err := c.call(ctx, request{Op: "batch_exist", Keys: keys}, nil, nil)
	if err == nil && len(rep.Bools) != len(keys) {
		err = badReply(nil, true)
	}
	return rep.Bools, err
}

// Stat describes key.
func (c *Client) Stat(ctx context.Context, key string) (store.ObjectInfo, error) {
	rep, _, err := c.call(ctx, request{Op: "stat", Key: key}, nil, nil)
	if err != nil {
		return store.ObjectInfo{}, err
	}
	if rep.Info == nil {
		return store.ObjectInfo{}, badReply(nil, true)
	}
	return *rep.Info, nil
}

// Remove deletes key.
func (c *Client) Remove(ctx context.Context, key string, force bool) error {
	_, _, err := c.call(ctx, request{Op: "remove", Key: key, Force: force}, nil, nil)
	return err
}

// BatchRemove deletes keys; one error per key.
func (c *Client) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	rep, _, err := c.call(ctx, request{Op: "batch_remove", Keys: keys, Force: force}, nil, nil)
	out := make([]error, len(keys))
	for i := range out {
		switch {
		case err != nil:
			out[i] = err
		case i < len(rep.Errs):
			out[i] = fromWire(rep.Errs[i])
		default:
			out[i] = badReply(nil, true)
		}
	}
	return out
}

// RemoveByRegex deletes the keys matching pattern.
func (c *Client) RemoveByRegex(ctx context.Context, pattern string, force bool) (int, error) {
	rep, _, err := c.call(ctx, request{Op: "remove_regex", Pattern: pattern, Force: force}, nil, nil)
	return int(rep.N), err
}

// RemoveAll deletes every key.
func (c *Client) RemoveAll(ctx context.Context, force bool) (int, error) {
	rep, _, err := c.call(ctx, request{Op: "remove_all", Force: force}, nil, nil)
	return int(rep.N), err
}

// List pages through the keys with prefix.
func (c *Client) List(ctx context.Context, prefix, after string, limit int) ([]store.KeyInfo, string, error) {
	rep, _, err := c.call(ctx, request{Op: "list", Prefix: prefix, After: after, Limit: limit}, nil, nil)
	return rep.List, rep.Next, err
}

func badReply(err error, bad bool) error {
	if err != nil || !bad {
		return nil
	}
	return errors.New("dummyclient: malformed reply from the real client")
}
