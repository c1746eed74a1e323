package transfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/time/rate"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// Opcode is the direction of a request, seen from the initiator.
type Opcode uint8

// Opcodes (Mooncake's numbering).
const (
	OpRead  Opcode = 0 // remote -> local
	OpWrite Opcode = 1 // local -> remote
)

// SegmentID is a handle on an opened remote segment.
type SegmentID uint64

// SegmentDesc describes a peer engine's segment.
type SegmentDesc struct {
	Name      string
	Transport string // "tcp" (the segment's protocol)
	Addr      string // host:port of its RPC/data port
	HostID    string // same value = same host (shared memory possible)
	Buffers   []BufferDesc
}

// BufferDesc is one registered buffer of a segment.
type BufferDesc struct {
	Addr      uint64
	Length    uint64
	Location  string
	Shareable bool
}

// Notification is a message received from a peer (see Engine.Notify).
type Notification struct {
	From, Name string
	Msg        []byte
}

// metaStore is a metadata service: the HTTP metadata server or etcd.
type metaStore interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, val []byte) error
	Delete(ctx context.Context, key string) error
	Close() error
}

// Engine is one process's transfer engine: its registered memory (the
// segment), its RPC/data listener, and its connections to peers.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	reg    *registry.Registry
	ln     net.Listener
	name   string
	port   int
	hostID string
	meta   metaStore
	shm    *shmState
	// transports, most preferred first (newTransports).
	transports []transport

	closed atomic.Bool
	done   chan struct{}
	wg     sync.WaitGroup
	// life is held (read) by Submit so that Close does not start waiting
	// for goroutines while a Submit may still add one.
	life sync.RWMutex

	connMu sync.Mutex
	conns  map[net.Conn]struct{}
	lanes  map[net.Conn]*inLane // inbound data lanes being served (fence.go)

	segMu     sync.Mutex
	segByName map[string]SegmentID
	segs      map[SegmentID]*segment
	nextSeg   SegmentID

	notifyMu sync.Mutex
	notifies []Notification

	pubMu  sync.Mutex // serializes metadata publication
	replay *replayGuard

	managedMu sync.Mutex
	managed   map[uint64]*managedBuf

	// bulk bounds how many lanes stream large payloads at once (see tcp.ServerConfig).
	bulk chan struct{}
	// clientBulk is the same for this engine's outgoing lanes.
	clientBulk chan struct{}
	// link paces the TCP WRITE payloads this engine sends (Config.LinkRate); nil = unlimited.
	link *rate.Limiter
	// devs is the device support (Config.Device); nil without (device.go).
	devs *devState
	// sources are the registered ranges served by a Source (source.go), by buffer ID.
	sources sync.Map
}

type segment struct {
	id   SegmentID
	name string

	// peers holds one handle per engine transport (Engine.transports).
	peers []peer

	mu     sync.Mutex
	desc   wire.Segment
	descAt time.Time // when desc was fetched
}

// Open starts an engine: it listens on the RPC port (which also carries TCP
// data lanes), and publishes its segment when a metadata service is used.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.hostPort(cfg.RPCPort))
	if err != nil {
		return nil, fmt.Errorf("transfer: listen: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	e := &Engine{
		cfg:        cfg,
		log:        cfg.Logger,
		reg:        registry.New(),
		ln:         ln,
		port:       port,
		name:       cfg.hostPort(port),
		hostID:     hostID(),
		done:       make(chan struct{}),
		conns:      map[net.Conn]struct{}{},
		lanes:      map[net.Conn]*inLane{},
		segByName:  map[string]SegmentID{},
		segs:       map[SegmentID]*segment{},
		managed:    map[uint64]*managedBuf{},
		replay:     newReplayGuard(2*time.Minute, time.Now),
		bulk:       make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1)),
		clientBulk: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1)),
	}
	if cfg.LinkRate > 0 {
		e.link = rate.NewLimiter(rate.Limit(cfg.LinkRate), cfg.LinkBurst)
	}
	e.transports = e.newTransports()
	e.startDevice()
	if cfg.Transport == TransportInproc {
		if err := cfg.InprocHub.h.Add(e.name, e.laneMemory()); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("transfer: %w", err)
		}
	}
	if err := e.startShm(); err != nil {
		e.leaveHub()
		_ = ln.Close()
		return nil, err
	}
	if cfg.Metadata != MetadataP2P {
		m, err := openMetaStore(ctx, cfg.Metadata)
		if err != nil {
			e.stopShm()
			e.leaveHub()
			_ = ln.Close()
			return nil, err
		}
		e.meta = m
		if err := e.publish(ctx); err != nil {
			_ = m.Close()
			e.stopShm()
			e.leaveHub()
			_ = ln.Close()
			return nil, err
		}
	}
	e.wg.Add(1)
	go e.acceptLoop()
	if e.meta != nil {
		e.wg.Add(1)
		go e.keepPublished(e.cfg.MetadataRefresh)
	}
	e.log.Info("transfer engine open", "segment", e.name, "transport", cfg.Transport, "metadata", cfg.Metadata)
	return e, nil
}

// leaveHub withdraws the engine from the in-process hub.
func (e *Engine) leaveHub() {
	if e.cfg.Transport == TransportInproc {
		e.cfg.InprocHub.h.Remove(e.name)
	}
}

// Name is this engine's segment name ("host:rpcport"), the session id peers open.
func (e *Engine) Name() string { return e.name }

// RPCPort is the port peers handshake with (and open data lanes to).
func (e *Engine) RPCPort() int { return e.port }

// Close stops serving, fails every transfer still in flight with ErrClosed,
// waits for every goroutine of the engine, unmaps managed buffers and
// withdraws the segment from the metadata service.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.life.Lock()
	e.life.Unlock() //nolint:staticcheck // a barrier: every Submit in progress has finished
	close(e.done)
	_ = e.ln.Close()
	e.connMu.Lock()
	for c := range e.conns {
		_ = c.Close()
	}
	e.connMu.Unlock()
	e.segMu.Lock()
	segs := make([]*segment, 0, len(e.segs))
	for _, s := range e.segs {
		segs = append(segs, s)
	}
	e.segMu.Unlock()
	for _, s := range segs {
		for _, p := range s.peers {
			p.close(fmt.Errorf("transfer: %w", ErrClosed))
		}
	}
	e.wg.Wait()
	e.leaveHub()
	var err error
	if e.meta != nil {
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.HandshakeTimeout)
		err = e.meta.Delete(ctx, wire.SegmentKey(e.name))
		cancel()
		err = errors.Join(err, e.meta.Close())
	}
	e.stopShm()
	e.freeAllManaged()
	e.stopDevice()
	return err
}

// AddrOf is the address of b's first byte, as used in Requests.
func AddrOf(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// RegisterBytes registers b (its address is AddrOf(b)) for transfers.
// location is a tag such as "cpu:0" ("" means "*").
func (e *Engine) RegisterBytes(b []byte, location string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if _, err := e.reg.Register(b, location, false); err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	e.republish()
	return nil
}

// Register registers length bytes of raw memory at addr (for bindings that
// hand us C or numpy memory). With Config.Device, an address the driver
// says is device memory is registered as such (RegisterDevice). The memory must stay valid until Unregister.
func (e *Engine) Register(addr uintptr, length int, location string) error {
	if addr == 0 || length <= 0 {
		return fmt.Errorf("transfer: register %#x+%d: %w", addr, length, ErrInvalid)
	}
	if e.isDevice(addr) {
		return e.RegisterDevice(addr, length, location)
	}
	return e.RegisterBytes(registry.RawBytes(addr, length), location)
}

// Unregister removes the buffer that starts at addr. Transfers still using it
// finish first (they end by their deadline at the latest); later ones are
// rejected (ErrNotRegistered locally, ErrOutOfBounds at a peer).
func (e *Engine) Unregister(addr uintptr) error {
	b, err := e.reg.Unregister(uint64(addr))
	if err != nil {
		if errors.Is(err, registry.ErrNotRegistered) {
			return fmt.Errorf("transfer: %w: %w", ErrNotRegistered, err)
		}
		return fmt.Errorf("transfer: %w", err)
	}
	e.sources.Delete(b.ID)
	e.republish()
	return nil
}

// Buffers lists this engine's registered buffers.
func (e *Engine) Buffers() []BufferDesc {
	bs := e.published()
	out := make([]BufferDesc, len(bs))
	for i, b := range bs {
		out[i] = BufferDesc{Addr: b.Addr, Length: b.Length, Location: b.Location, Shareable: b.Shareable}
	}
	return out
}

func (e *Engine) descriptor() wire.Segment {
	bs := e.published()
	s := wire.Segment{
		Name:            e.name,
		Protocol:        "tcp",
		IP:              e.cfg.LocalHostname,
		RPCPort:         e.port,
		TCPDataPort:     e.port,
		TCPProtoVersion: 2,
		Timestamp:       time.Now().UTC().Format(time.RFC3339Nano),
		HostID:          e.hostID,
		PID:             os.Getpid(),
		Buffers:         make([]wire.Buffer, len(bs)),
	}
	if e.shm != nil {
		s.ShmSocket = e.shm.path
	}
	for i, b := range bs {
		s.Buffers[i] = wire.Buffer{Name: "buf" + strconv.FormatUint(b.ID, 10), Addr: b.Addr, Length: b.Length,
			Location: b.Location, Shareable: b.Shareable && e.cfg.Grants == nil, ID: b.ID}
		if b.Device && e.cfg.Grants == nil {
			e.describeDevice(&s.Buffers[i])
		}
	}
	return s
}

func descFromWire(s wire.Segment) SegmentDesc {
	d := SegmentDesc{Name: s.Name, Transport: s.Protocol, Addr: net.JoinHostPort(s.IP, strconv.Itoa(s.RPCPort)), HostID: s.HostID}
	for _, b := range s.Buffers {
		d.Buffers = append(d.Buffers, BufferDesc{Addr: b.Addr, Length: b.Length, Location: b.Location, Shareable: b.Shareable})
	}
	return d
}

// descStale reports whether the cached descriptor is old enough to refetch
// when a request names memory it does not list (at most twice a second).
func (s *segment) descStale() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.descAt) > 500*time.Millisecond
}

// OpenSegment opens (and caches) a peer's segment by name and returns its handle.
func (e *Engine) OpenSegment(ctx context.Context, name string) (SegmentID, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	e.segMu.Lock()
	if id, ok := e.segByName[name]; ok {
		e.segMu.Unlock()
		return id, nil
	}
	e.segMu.Unlock()
	seg := e.newSegment(name)
	if err := e.refresh(ctx, seg); err != nil {
		return 0, err
	}
	e.segMu.Lock()
	defer e.segMu.Unlock()
	if id, ok := e.segByName[name]; ok {
		return id, nil
	}
	e.nextSeg++
	seg.id = e.nextSeg
	e.segByName[name] = seg.id
	e.segs[seg.id] = seg
	return seg.id, nil
}

// Segment fetches the peer's current descriptor (and refreshes the cache).
func (e *Engine) Segment(ctx context.Context, name string) (SegmentDesc, error) {
	id, err := e.OpenSegment(ctx, name)
	if err != nil {
		return SegmentDesc{}, err
	}
	seg := e.segment(id)
	if seg == nil {
		return SegmentDesc{}, ErrClosed
	}
	if err := e.refresh(ctx, seg); err != nil {
		return SegmentDesc{}, err
	}
	seg.mu.Lock()
	defer seg.mu.Unlock()
	return descFromWire(seg.desc), nil
}

func (e *Engine) segment(id SegmentID) *segment {
	e.segMu.Lock()
	defer e.segMu.Unlock()
	return e.segs[id]
}

// refresh resolves seg's descriptor: in process, by P2P handshake, or from
// the metadata service.
func (e *Engine) refresh(ctx context.Context, seg *segment) error {
	if e.cfg.Transport == TransportInproc {
		if _, ok := e.cfg.InprocHub.h.Lookup(seg.name); !ok {
			return fmt.Errorf("transfer: open %q: %w: no in-process engine of that name", seg.name, ErrUnknownSegment)
		}
		seg.mu.Lock()
		seg.desc = wire.Segment{Name: seg.name, Protocol: TransportInproc}
		seg.descAt = time.Now()
		seg.mu.Unlock()
		return nil
	}
	var desc wire.Segment
	if e.meta == nil {
		rep, err := e.call(ctx, seg.name, wire.FrameMetadata, wire.Control{})
		if err != nil {
			if errors.Is(err, ErrAuth) || errors.Is(err, ErrClosed) {
				return fmt.Errorf("transfer: open %q: %w", seg.name, err)
			}
			return fmt.Errorf("transfer: open %q: %w: %w", seg.name, ErrUnknownSegment, err)
		}
		if rep.Segment == nil {
			return fmt.Errorf("transfer: open %q: %w: peer sent no descriptor", seg.name, ErrUnknownSegment)
		}
		desc = *rep.Segment
	} else {
		b, err := e.meta.Get(ctx, wire.SegmentKey(seg.name))
		if err != nil {
			return fmt.Errorf("transfer: open %q: %w: %w", seg.name, ErrUnknownSegment, err)
		}
		desc, err = wire.DecodeSegment(b)
		if err != nil {
			return fmt.Errorf("transfer: open %q: %w: %w", seg.name, ErrUnknownSegment, err)
		}
	}
	seg.mu.Lock()
	seg.desc = desc
	seg.descAt = time.Now()
	seg.mu.Unlock()
	return nil
}

// Notify sends a small message to a peer (by segment name); the peer's
// application drains it with Notifies.
func (e *Engine) Notify(ctx context.Context, peer string, name string, msg []byte) error {
	if len(msg)+len(name) > e.cfg.MaxFrame-1024 {
		return fmt.Errorf("transfer: notify: %w: message of %d bytes too large", ErrInvalid, len(msg))
	}
	_, err := e.call(ctx, e.addrOf(ctx, peer), wire.FrameNotify, wire.Control{Notify: &wire.Notify{From: e.name, Name: name, Msg: msg}})
	if err != nil {
		return fmt.Errorf("transfer: notify %q: %w", peer, err)
	}
	return nil
}

func (e *Engine) deliver(n Notification) error {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	if len(e.notifies) >= e.cfg.MaxNotifies {
		return fmt.Errorf("transfer: notify: peer queue full (%d)", len(e.notifies))
	}
	e.notifies = append(e.notifies, n)
	return nil
}

// Notifies drains the notifications received so far (like get_notifies).
func (e *Engine) Notifies() []Notification {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	out := e.notifies
	e.notifies = nil
	return out
}

// Probe checks that a peer is alive and answering.
func (e *Engine) Probe(ctx context.Context, peer string) error {
	if _, err := e.call(ctx, e.addrOf(ctx, peer), wire.FrameProbe, wire.Control{}); err != nil {
		return fmt.Errorf("transfer: probe %q: %w", peer, err)
	}
	return nil
}

// addrOf maps a segment name to the address of its RPC port.
func (e *Engine) addrOf(ctx context.Context, name string) string {
	e.segMu.Lock()
	id, ok := e.segByName[name]
	seg := e.segs[id]
	e.segMu.Unlock()
	if ok && seg != nil {
		seg.mu.Lock()
		d := seg.desc
		seg.mu.Unlock()
		if d.IP != "" && d.RPCPort != 0 {
			return net.JoinHostPort(d.IP, strconv.Itoa(d.RPCPort))
		}
	}
	if e.meta != nil {
		if b, err := e.meta.Get(ctx, wire.SegmentKey(name)); err == nil {
			if d, err := wire.DecodeSegment(b); err == nil && d.IP != "" {
				return net.JoinHostPort(d.IP, strconv.Itoa(d.RPCPort))
			}
		}
	}
	return name
}

func hostID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	h, _ := os.Hostname()
	if err != nil {
		return h
	}
	return h + "/" + string(bufioTrim(b))
}

func bufioTrim(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
