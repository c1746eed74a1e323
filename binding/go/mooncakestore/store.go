package mooncakestore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// callTimeout bounds one call: Mooncake's calls block until the store
// answers; ours give up after this long with the call's error.
const callTimeout = 60 * time.Second

// Store is a store client: Setup (or InitAll) connects it, Close ends it.
type Store struct {
	mu       sync.RWMutex
	eng      *transfer.Engine
	c        *store.Client
	hostname string
	closed   bool
	bufs     map[uintptr][]byte // registered with RegisterBuffer, by address
}

// New returns a store handle; Setup or InitAll connects it.
func New() (*Store, error) {
	return &Store{bufs: map[uintptr][]byte{}}, nil
}

// Setup connects to the master at masterServerAddr ("host:port", or
// "etcd://..." for an HA cluster) and contributes globalSegmentSize bytes of
// memory to the pool; localBufferSize is the staging buffer of Put and Get.
// localHostname ("host" or "host:port") names this client's segment;
// metadataServer is not needed (see the package doc) and is ignored.
func (s *Store) Setup(localHostname, metadataServer string,
	globalSegmentSize, localBufferSize uint64,
	protocol, deviceName, masterServerAddr string) error {
	if s == nil {
		return ErrStoreNil
	}
	if masterServerAddr == "" {
		return wrap(ErrSetupFailed, errors.New("no master address"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil || s.closed {
		return wrap(ErrSetupFailed, errors.New("store already set up or closed"))
	}
	host, port := splitHostPort(localHostname)
	cfg := transfer.Config{LocalHostname: host, RPCPort: port, Metadata: transfer.MetadataP2P}
	switch p := strings.ToLower(strings.TrimSpace(protocol)); p {
	case "", "auto":
		cfg.Transport = transfer.TransportAuto
	case "shm":
		cfg.Transport = transfer.TransportShm
	case "tcp":
		cfg.Transport = transfer.TransportTCP
	default: // rdma, nvlink, cxl, ...: no such hardware path here
		fmt.Fprintf(os.Stderr, "mooncakestore: protocol %q is not available; using tcp\n", protocol)
		cfg.Transport = transfer.TransportTCP
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	eng, err := transfer.Open(ctx, cfg)
	if errors.Is(err, syscall.EADDRINUSE) && cfg.RPCPort != 0 {
		// Mooncake's engine takes a free port whatever local_hostname says.
		cfg.RPCPort = 0
		eng, err = transfer.Open(ctx, cfg)
	}
	if err != nil {
		return wrap(ErrSetupFailed, err)
	}
	c, err := store.New(ctx, store.Config{
		Master:          masterServerAddr,
		Mover:           eng,
		SegmentSize:     globalSegmentSize,
		LocalBufferSize: localBufferSize,
	})
	if err != nil {
		_ = eng.Close()
		return wrap(ErrSetupFailed, err)
	}
	s.eng, s.c, s.hostname = eng, c, localHostname
	if s.hostname == "" {
		s.hostname = c.SegmentName()
	}
	return nil
}

// InitAll is Setup with Mooncake's defaults (local hostname
// localhost:12345, a 1 GiB staging buffer, the master at 127.0.0.1:50051)
// and a segment of mountSegmentSize bytes.
func (s *Store) InitAll(protocol, deviceName string, mountSegmentSize uint64) error {
	if s == nil {
		return ErrStoreNil
	}
	if err := s.Setup("localhost:12345", "127.0.0.1:2379", mountSegmentSize, 1<<30, protocol, deviceName, "127.0.0.1:50051"); err != nil {
		return wrap(ErrInitAllFailed, err)
	}
	return nil
}

// HealthCheck fails when the store is not set up or the master has not
// answered the client's pings lately.
func (s *Store) HealthCheck() error {
	c, err := s.client()
	if err != nil {
		return wrap(ErrHealthCheck, err)
	}
	if h := c.Health(); h.PingFailures > 0 {
		return wrap(ErrHealthCheck, fmt.Errorf("%d consecutive pings to the master failed", h.PingFailures))
	}
	return nil
}

// Close unmounts the segment, leaves the pool and releases the store.
// Later calls fail with ErrStoreNil.
func (s *Store) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.c != nil {
		_ = s.c.Close()
	}
	if s.eng != nil {
		_ = s.eng.Close()
	}
	s.c, s.eng, s.bufs = nil, nil, nil
}

// client returns the connected client (under the read lock's snapshot).
func (s *Store) client() (*store.Client, error) {
	if s == nil {
		return nil, ErrStoreNil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.c == nil {
		return nil, ErrStoreNil
	}
	return s.c, nil
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

func options(cfg *ReplicateConfig) (store.PutOptions, error) {
	if cfg == nil {
		return store.PutOptions{Replicas: 1}, nil
	}
	if cfg.ReplicaNum <= 0 {
		return store.PutOptions{}, ErrInvalidArgument
	}
	return store.PutOptions{Replicas: cfg.ReplicaNum, SoftPin: cfg.WithSoftPin, HardPin: cfg.WithHardPin,
		PreferredSegments: cfg.PreferredSegments}, nil
}

// existsOK is Mooncake's put of a key that is already stored: success.
func existsOK(err error) error {
	if errors.Is(err, store.ErrExists) {
		return nil
	}
	return err
}

// Put stores value under key (nil config: one replica).
func (s *Store) Put(key string, value []byte, config *ReplicateConfig) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	o, err := options(config)
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	return wrap(ErrPut, existsOK(c.PutWith(cx, key, value, o)))
}

// PutFrom stores size bytes at ptr under key; memory registered with
// RegisterBuffer is read zero-copy.
func (s *Store) PutFrom(key string, ptr uintptr, size uint64, config *ReplicateConfig) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	if ptr == 0 || size == 0 {
		return ErrInvalidArgument
	}
	o, err := options(config)
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	src := s.bytesAt(ptr, size)
	if s.registered(ptr, size) {
		return wrap(ErrPut, existsOK(c.PutFrom(cx, key, src, o)))
	}
	return wrap(ErrPut, existsOK(c.PutWith(cx, key, src, o)))
}

// BatchPutFrom stores each (ptrs[i], sizes[i]) under keys[i]; the result of
// each is 0 or Mooncake's negative error code.
func (s *Store) BatchPutFrom(keys []string, ptrs []uintptr, sizes []uint64,
	config *ReplicateConfig) ([]int, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	if len(ptrs) != len(keys) || len(sizes) != len(keys) {
		return nil, ErrInvalidArgument
	}
	o, err := options(config)
	if err != nil {
		return nil, err
	}
	values := make([][]byte, len(keys))
	for i := range keys {
		if ptrs[i] == 0 || sizes[i] == 0 {
			return nil, ErrInvalidArgument
		}
		values[i] = s.bytesAt(ptrs[i], sizes[i])
	}
	cx, cancel := ctx()
	defer cancel()
	errs := c.BatchPut(cx, keys, values, o)
	out := make([]int, len(keys))
	for i, e := range errs {
		out[i] = int(code(existsOK(e)))
	}
	return out, nil
}

// GetInto reads key into the size bytes at ptr and returns the object's
// length.
func (s *Store) GetInto(key string, ptr uintptr, size uint64) (int64, error) {
	if ptr == 0 || size == 0 {
		if _, err := s.client(); err != nil {
			return 0, err
		}
		return 0, ErrInvalidArgument
	}
	return s.Get(key, s.bytesAt(ptr, size))
}

// Get reads key into buf and returns the object's length.
func (s *Store) Get(key string, buf []byte) (int64, error) {
	c, err := s.client()
	if err != nil {
		return 0, err
	}
	if len(buf) == 0 {
		return 0, ErrInvalidArgument
	}
	cx, cancel := ctx()
	defer cancel()
	if s.registeredSlice(buf) {
		n, err := c.GetInto(cx, key, buf)
		if err != nil {
			return 0, wrap(ErrGet, err)
		}
		return int64(n), nil
	}
	v, err := c.Get(cx, key) // staged through the client's registered buffer
	if err != nil {
		return 0, wrap(ErrGet, err)
	}
	if len(v) > len(buf) {
		return 0, wrap(ErrGet, fmt.Errorf("value of %d bytes, buffer of %d: %w", len(v), len(buf), store.ErrBufferTooSmall))
	}
	return int64(copy(buf, v)), nil
}

// BatchGetInto reads each keys[i] into (ptrs[i], sizes[i]); the result of
// each is its length or Mooncake's negative error code.
func (s *Store) BatchGetInto(keys []string, ptrs []uintptr, sizes []uint64) ([]int64, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	if len(ptrs) != len(keys) || len(sizes) != len(keys) {
		return nil, ErrInvalidArgument
	}
	dsts := make([][]byte, len(keys))
	all := true
	for i := range keys {
		if ptrs[i] == 0 || sizes[i] == 0 {
			return nil, ErrInvalidArgument
		}
		dsts[i] = s.bytesAt(ptrs[i], sizes[i])
		all = all && s.registered(ptrs[i], sizes[i])
	}
	cx, cancel := ctx()
	defer cancel()
	out := make([]int64, len(keys))
	if all {
		ns, errs := c.BatchGetInto(cx, keys, dsts)
		for i := range keys {
			if errs[i] != nil {
				out[i] = code(errs[i])
			} else {
				out[i] = int64(ns[i])
			}
		}
		return out, nil
	}
	vals, errs := c.BatchGet(cx, keys) // staged: some destination is not registered
	for i := range keys {
		switch {
		case errs[i] != nil:
			out[i] = code(errs[i])
		case len(vals[i]) > len(dsts[i]):
			out[i] = codeBufferOverflow
		default:
			out[i] = int64(copy(dsts[i], vals[i]))
		}
	}
	return out, nil
}

// Exists reports whether key is stored (complete).
func (s *Store) Exists(key string) (bool, error) {
	c, err := s.client()
	if err != nil {
		return false, err
	}
	cx, cancel := ctx()
	defer cancel()
	ok, err := c.Exist(cx, key)
	return ok, wrap(ErrExist, err)
}

// BatchExists reports for each key whether it is stored.
func (s *Store) BatchExists(keys []string) ([]bool, error) {
	c, err := s.client()
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	cx, cancel := ctx()
	defer cancel()
	ok, err := c.BatchExist(cx, keys)
	if err != nil {
		return nil, wrap(ErrBatchOp, err)
	}
	return ok, nil
}

// GetSize returns the length of the object under key.
func (s *Store) GetSize(key string) (int64, error) {
	c, err := s.client()
	if err != nil {
		return 0, err
	}
	cx, cancel := ctx()
	defer cancel()
	info, err := c.Stat(cx, key)
	if err != nil {
		return 0, wrap(ErrGetSize, err)
	}
	return int64(info.Size), nil
}

// Hostname returns the local hostname given to Setup.
func (s *Store) Hostname() (string, error) {
	if _, err := s.client(); err != nil {
		return "", err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.hostname == "" {
		return "", ErrHostname
	}
	return s.hostname, nil
}

// Remove deletes key; without force a key under a read lease is kept
// (Mooncake's OBJECT_HAS_LEASE).
func (s *Store) Remove(key string, force bool) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	return wrap(ErrRemove, c.Remove(cx, key, force))
}

// RemoveByRegex deletes the keys matching pattern (RE2 syntax) and returns
// how many it removed.
func (s *Store) RemoveByRegex(pattern string, force bool) (int64, error) {
	c, err := s.client()
	if err != nil {
		return 0, err
	}
	cx, cancel := ctx()
	defer cancel()
	n, err := c.RemoveByRegex(cx, pattern, force)
	if err != nil {
		return 0, wrap(ErrRemove, err)
	}
	return int64(n), nil
}

// RemoveAll deletes every key and returns how many it removed.
func (s *Store) RemoveAll(force bool) (int64, error) {
	c, err := s.client()
	if err != nil {
		return 0, err
	}
	cx, cancel := ctx()
	defer cancel()
	n, err := c.RemoveAll(cx, force)
	if err != nil {
		return 0, wrap(ErrRemove, err)
	}
	return int64(n), nil
}

// RegisterBuffer registers size bytes at ptr with the transfer engine, so
// PutFrom and GetInto move them without a staging copy.
func (s *Store) RegisterBuffer(ptr uintptr, size uint64) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	if ptr == 0 || size == 0 {
		return ErrInvalidArgument
	}
	b := s.bytesAt(ptr, size)
	if err := c.RegisterBuffer(b); err != nil {
		return wrap(ErrRegisterBuffer, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bufs == nil {
		s.bufs = map[uintptr][]byte{}
	}
	s.bufs[ptr] = b
	return nil
}

// UnregisterBuffer undoes RegisterBuffer of the buffer at ptr.
func (s *Store) UnregisterBuffer(ptr uintptr) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	s.mu.Lock()
	b, ok := s.bufs[ptr]
	delete(s.bufs, ptr)
	s.mu.Unlock()
	if !ok {
		return wrap(ErrUnregisterBuffer, fmt.Errorf("no buffer registered at %#x", ptr))
	}
	return wrap(ErrUnregisterBuffer, c.UnregisterBuffer(b))
}

// registeredSlice reports whether b lies in a registered buffer.
func (s *Store) registeredSlice(b []byte) bool {
	return len(b) > 0 && s.registered(uintptr(unsafe.Pointer(&b[0])), uint64(len(b)))
}

// registered reports whether [ptr, ptr+size) lies in a registered buffer.
func (s *Store) registered(ptr uintptr, size uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for base, b := range s.bufs {
		if ptr >= base && uint64(ptr-base)+size <= uint64(len(b)) {
			return true
		}
	}
	return false
}

// bytesAt is the caller's memory at ptr as a slice: the binding's calls
// take raw addresses, as Mooncake's C API does. A slice of a registered
// buffer is taken from that buffer's slice, so the Go pointer is kept.
func (s *Store) bytesAt(ptr uintptr, size uint64) []byte {
	s.mu.RLock()
	for base, b := range s.bufs {
		if ptr >= base && uint64(ptr-base)+size <= uint64(len(b)) {
			off := int(ptr - base)
			s.mu.RUnlock()
			return b[off : off+int(size) : off+int(size)]
		}
	}
	s.mu.RUnlock()
	// The address came from the caller as an integer (uintptr(unsafe.Pointer(&buf[0]))
	// or C memory); reading it back through a pointer-sized word keeps
	// the conversion out of vet's uintptr-arithmetic check.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&ptr))
	return unsafe.Slice((*byte)(p), int(size))
}

func splitHostPort(hp string) (string, int) {
	hp = strings.TrimSpace(hp)
	if hp == "" {
		return "127.0.0.1", 0
	}
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return hp, 0
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return h, 0
	}
	return h, n
}
