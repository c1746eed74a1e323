package dummyclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/store"
)

// Backend is what the real client does for its dummies: a *store.Client.
type Backend interface {
	PutWith(ctx context.Context, key string, value []byte, o store.PutOptions) error
	PutFrom(ctx context.Context, key string, src []byte, o store.PutOptions) error
	Get(ctx context.Context, key string) ([]byte, error)
	GetInto(ctx context.Context, key string, dst []byte) (int, error)
	Exist(ctx context.Context, key string) (bool, error)
	BatchExist(ctx context.Context, keys []string) ([]bool, error)
	Stat(ctx context.Context, key string) (store.ObjectInfo, error)
	Remove(ctx context.Context, key string, force bool) error
	BatchRemove(ctx context.Context, keys []string, force bool) []error
	RemoveByRegex(ctx context.Context, pattern string, force bool) (int, error)
	RemoveAll(ctx context.Context, force bool) (int, error)
	List(ctx context.Context, prefix, after string, limit int) ([]store.KeyInfo, string, error)
	RegisterBuffer(b []byte) error
	UnregisterBuffer(b []byte) error
	SegmentName() string
}

// Config configures a Server.
type Config struct {
	Addr    string  // the address dummies are given ("host:port"); the socket is SocketName(Addr)
	Store   Backend // the real client's store client
	Name    string  // the real client's name dummies report (get_hostname); "" = Store.SegmentName()
	MaxPool uint64  // largest pool one dummy may attach (0 = 64 GiB)
	// AllowUIDs are the users, besides this process's and root, whose
	// dummies are served (peer.go); others are refused at attach.
	AllowUIDs []uint32
	Logger    *slog.Logger
}

// Server serves dummy clients.
type Server struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	conns map[*net.UnixConn]struct{}
	wg    sync.WaitGroup
}

// New validates cfg; it binds nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Addr == "" || cfg.Store == nil {
		return nil, errors.New("dummyclient: Config needs Addr and Store")
	}
	if cfg.MaxPool == 0 {
		cfg.MaxPool = 64 << 30
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, log: log.With("component", "dummyclient"), conns: map[*net.UnixConn]struct{}{}}, nil
}

// Listen binds the server's socket.
func (s *Server) Listen() (*net.UnixListener, error) {
	return net.ListenUnix("unix", &net.UnixAddr{Name: SocketName(s.cfg.Addr), Net: "unix"})
}

// Run listens on SocketName(Addr) and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	ln, err := s.Listen()
	if err != nil {
		return fmt.Errorf("dummyclient: listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves dummies on ln until ctx ends; it closes ln and every
// connection, and frees every pool, before returning.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() {
		_ = ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
	})
	defer stop()
	var err error
	for {
		c, aerr := ln.AcceptUnix()
		if aerr != nil {
			if ctx.Err() == nil {
				err = aerr
			}
			break
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				_ = c.Close()
			}()
			s.serveConn(ctx, c)
		})
	}
	_ = ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// pool is a dummy's shared memory, mapped here.
type pool struct {
	fd  int
	mem []byte
}

func newPool(size uint64) (*pool, error) {
	fd, err := unix.MemfdCreate("mooncake-dummy-pool", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("ftruncate: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &pool{fd: fd, mem: mem}, nil
}

func (p *pool) free() {
	if p.mem != nil {
		_ = unix.Munmap(p.mem)
	}
	if p.fd >= 0 {
		_ = unix.Close(p.fd)
	}
}

// slice is pool[off:off+n], or an error when out of range.
func (p *pool) slice(off, n uint64) ([]byte, error) {
	if p == nil || off > uint64(len(p.mem)) || n > uint64(len(p.mem))-off {
		return nil, fmt.Errorf("dummyclient: pool range [%d, +%d) out of bounds: %w", off, n, store.ErrInvalid)
	}
	return p.mem[off : off+n : off+n], nil
}

func (s *Server) serveConn(ctx context.Context, c *net.UnixConn) {
	var p *pool
	defer func() {
		if p != nil {
			if err := s.cfg.Store.UnregisterBuffer(p.mem); err != nil {
				s.log.Warn("unregister pool", "err", err)
			}
			p.free()
		}
	}()
	r := bufio.NewReaderSize(c, 256<<10)
	w := bufio.NewWriterSize(c, 256<<10)
	if err := checkPeer(c, s.cfg.AllowUIDs); err != nil {
		s.log.Warn("dummy client refused", "err", err)
		var req request
		if _, rerr := readFrame(r, &req, nil); rerr != nil {
			return
		}
		if _, _, werr := c.WriteMsgUnix([]byte{'E'}, nil, nil); werr == nil {
			_ = writeFrame(w, reply{Err: toWire(err)}, nil)
			_ = w.Flush()
		}
		return
	}
	for {
		var req request
		data, err := readFrame(r, &req, nil)
		if err != nil {
			return
		}
		if req.Op == "attach" {
			if p != nil || req.Pool == 0 || req.Pool > s.cfg.MaxPool {
				err = fmt.Errorf("dummyclient: attach: pool of %d bytes (max %d, once): %w", req.Pool, s.cfg.MaxPool, store.ErrInvalid)
			} else if p, err = newPool(req.Pool); err == nil {
				if err = s.cfg.Store.RegisterBuffer(p.mem); err != nil {
					p.free()
					p = nil
				}
			}
			if err != nil {
				s.log.Warn("attach", "err", err)
				if _, _, werr := c.WriteMsgUnix([]byte{'E'}, nil, nil); werr != nil {
					return
				}
				if writeFrame(w, reply{Err: toWire(err)}, nil) != nil || w.Flush() != nil {
					return
				}
				continue
			}
			// the descriptor first, on a byte of its own, then the reply
			if _, _, err := c.WriteMsgUnix([]byte{'A'}, unix.UnixRights(p.fd), nil); err != nil {
				return
			}
			name := s.cfg.Name
			if name == "" {
				name = s.cfg.Store.SegmentName()
			}
			if writeFrame(w, reply{Segment: name}, nil) != nil || w.Flush() != nil {
				return
			}
			s.log.Info("dummy client attached", "pool", req.Pool)
			continue
		}
		rep, out := s.handle(ctx, p, &req, data)
		if writeFrame(w, rep, out) != nil || w.Flush() != nil {
			return
		}
	}
}

// handle runs one request; out is inline reply data.
func (s *Server) handle(ctx context.Context, p *pool, q *request, data []byte) (rep reply, out []byte) {
	st := s.cfg.Store
	var err error
	switch q.Op {
	case "put":
		if q.InPool {
			var src []byte
			if src, err = p.slice(q.Off, q.Len); err == nil {
				err = st.PutFrom(ctx, q.Key, src, q.Opts)
			}
		} else {
			err = st.PutWith(ctx, q.Key, data, q.Opts)
		}
	case "get":
		out, err = st.Get(ctx, q.Key)
		rep.N = int64(len(out))
	case "get_into":
		var dst []byte
		if dst, err = p.slice(q.Off, q.Len); err == nil {
			var n int
			n, err = st.GetInto(ctx, q.Key, dst)
			rep.N = int64(n)
		}
	case "exist":
		var ok bool
		ok, err = st.Exist(ctx, q.Key)
		rep.Bools = []bool{ok}
	case "batch_exist":
		rep.Bools, err = st.BatchExist(ctx, q.Keys)
	case "stat":
		var info store.ObjectInfo
		if info, err = st.Stat(ctx, q.Key); err == nil {
			rep.Info = &info
		}
	case "remove":
		err = st.Remove(ctx, q.Key, q.Force)
	case "batch_remove":
		for _, e := range st.BatchRemove(ctx, q.Keys, q.Force) {
			rep.Errs = append(rep.Errs, toWire(e))
		}
	case "remove_regex":
		var n int
		n, err = st.RemoveByRegex(ctx, q.Pattern, q.Force)
		rep.N = int64(n)
	case "remove_all":
		var n int
		n, err = st.RemoveAll(ctx, q.Force)
		rep.N = int64(n)
	case "list":
		rep.List, rep.Next, err = st.List(ctx, q.Prefix, q.After, q.Limit)
	default:
		var ok bool
		if rep, ok, err = s.handleTask(ctx, q); !ok {
			err = fmt.Errorf("dummyclient: unknown op %q: %w", q.Op, store.ErrInvalid)
		}
	}
	if err != nil {
		return reply{Err: toWire(err)}, nil
	}
	return rep, out
}
