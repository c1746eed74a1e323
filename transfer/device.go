package transfer

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/cuda"
	"github.com/kvcache-go/mooncake/internal/transport/inproc"
	"github.com/kvcache-go/mooncake/internal/transport/registry"
)

// Device is the GPU driver through which the engine reaches device memory
// (Config.Device). *cuda.Driver is one; the engine never dereferences a
// device address itself.
type Device interface {
	PointerInfo(p uintptr) (device bool, ordinal int, err error)
	AddressRange(dev int, p uintptr) (base uintptr, size int, err error)
	CopyToHost(dev int, dst []byte, src uintptr) error
	CopyFromHost(dev int, dst uintptr, src []byte) error
	CopyDevice(dstDev int, dst uintptr, srcDev int, src uintptr, n int) error
	HostAlloc(dev, n int) ([]byte, error)
	HostFree(dev int, b []byte) error
}

var _ Device = (*cuda.Driver)(nil)

// Defaults of the device staging (Config.StageChunk, Config.StageBuffers).
const (
	DefaultStageChunk   = 1 << 20
	DefaultStageBuffers = 3
)

// devState is the engine's device support: nil without Config.Device.
type devState struct {
	dev Device
	// pinned holds pinned host buffers for the lanes that serve peers'
	// requests on this engine's device memory (deviceMemory).
	pinned pinnedPool
	// arenas are registered pinned staging areas for this engine's own
	// device requests (deviceJob), each StageBuffers chunks.
	arenaMu sync.Mutex
	arenas  []*stageArena
	all     []*stageArena
	// ipc: exported handles of registered device buffers and the peers'
	// allocations opened here (device_ipc.go).
	ipc ipcState
}

type stageArena struct {
	mem  []byte
	bufs [][]byte
}

func (e *Engine) startDevice() {
	if e.cfg.Device != nil {
		e.devs = &devState{dev: e.cfg.Device, pinned: pinnedPool{dev: e.cfg.Device}}
	}
}

// stopDevice frees the pinned memory; every job and lane has ended.
func (e *Engine) stopDevice() {
	if e.devs == nil {
		return
	}
	e.devs.pinned.close()
	e.closeIPC()
	for _, a := range e.devs.all {
		_, _ = e.reg.Unregister(registry.AddrOf(a.mem))
		_ = e.devs.dev.HostFree(0, a.mem)
	}
	e.devs.all, e.devs.arenas = nil, nil
}

// laneMemory is what lanes (and in-process peers) serving this engine's
// memory see: the registry, or, with a device, a Stager over it.
func (e *Engine) laneMemory() interface {
	Acquire(addr, n uint64) (registry.Span, error)
} {
	if e.devs == nil {
		return sourceMemory{e}
	}
	return &deviceMemory{reg: e.reg, d: e.devs, e: e}
}

// RegisterDevice registers length bytes of device memory at addr (a
// device address, as cuMemAlloc or torch return it). The range must lie in
// one allocation of the driver. location defaults to "cuda:<ordinal>".
// Without Config.Device it fails with ErrInvalid.
func (e *Engine) RegisterDevice(addr uintptr, length int, location string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if e.devs == nil {
		return fmt.Errorf("transfer: register device memory %#x: %w: the engine has no device driver (Config.Device)", addr, ErrInvalid)
	}
	if addr == 0 || length <= 0 {
		return fmt.Errorf("transfer: register device %#x+%d: %w", addr, length, ErrInvalid)
	}
	isDev, ord, err := e.devs.dev.PointerInfo(addr)
	if err != nil || !isDev {
		return fmt.Errorf("transfer: register device %#x: %w: not device memory (%v)", addr, ErrInvalid, err)
	}
	base, size, err := e.devs.dev.AddressRange(ord, addr)
	if err != nil {
		return fmt.Errorf("transfer: register device %#x: %w: %w", addr, ErrInvalid, err)
	}
	if end := addr + uintptr(length); end < addr || end > base+uintptr(size) {
		return fmt.Errorf("transfer: register device %#x+%d: %w: beyond its allocation %#x+%d", addr, length, ErrInvalid, base, size)
	}
	if location == "" || location == "*" {
		location = fmt.Sprintf("cuda:%d", ord)
	}
	if _, err := e.reg.RegisterDevice(uint64(addr), uint64(length), location, ord); err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	e.exportIPC(addr, ord, base)
	e.republish()
	return nil
}

// isDevice reports whether addr is device memory, asking the driver (false
// without one).
func (e *Engine) isDevice(addr uintptr) bool {
	if e.devs == nil || addr == 0 {
		return false
	}
	d, _, err := e.devs.dev.PointerInfo(addr)
	return err == nil && d
}

// pickDevice routes a task whose local memory is device memory: a job that
// copies with the driver, straight to in-process peers, staged through
// pinned host buffers otherwise. It reports whether t was routed.
func (e *Engine) pickDevice(t *task) bool {
	if e.devs == nil {
		return false
	}
	if j := e.ipcJobFor(t); j != nil {
		t.transport, t.job = TransportShm, j
		return true
	}
	if _, _, _, ok := t.local.Device(); !ok {
		return false
	}
	t.transport = TransportTCP
	if _, ok := t.seg.peers[0].(*inprocPeer); ok {
		t.transport = TransportInproc
	}
	t.job = &deviceJob{e: e}
	return true
}

// deviceJob moves a task whose local side is device memory. It runs on a
// goroutine of its own: in process it copies with the driver (device to
// device, or device to and from the peer's host memory); otherwise the
// bytes go through a registered pinned arena in chunks, the copy from or to
// the GPU of one chunk overlapping the network transfer of the next
// (cuda.Stage), each chunk an ordinary host transfer of the engine.
type deviceJob struct {
	e      *Engine
	cancel context.CancelCauseFunc
}

func (j *deviceJob) slices() int { return 1 }
func (j *deviceJob) async() bool { return true }
func (j *deviceJob) drop()       {}

// abort runs with Batch.mu held, as run does.
func (j *deviceJob) abort(err error) {
	if j.cancel != nil {
		j.cancel(err)
	}
}

func (j *deviceJob) run(_ context.Context, b *Batch, t *task) {
	ctx, cancel := context.WithDeadlineCause(context.Background(), b.deadline,
		fmt.Errorf("transfer: deadline %s passed: %w", b.deadline.Format(time.RFC3339Nano), ErrTimeout))
	ctx, cancelCause := context.WithCancelCause(ctx)
	j.cancel = cancelCause
	j.e.wg.Add(1)
	go func() {
		defer j.e.wg.Done()
		defer cancel()
		err := j.move(ctx, t)
		if err != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		cancelCause(nil)
		b.sliceDone(t, err)
	}()
}

func (j *deviceJob) move(ctx context.Context, t *task) error {
	e := j.e
	addr, n, ord, _ := t.local.Device()
	if done, err := j.direct(t, uintptr(addr), int(n), ord); done {
		return err
	}
	a, err := e.devs.arena(e)
	if err != nil {
		return err
	}
	defer e.devs.release(a)
	d := e.devs.dev
	req := func(op Opcode, off int, buf []byte) []Request {
		// The staged pieces lie inside the request's remote extent: its
		// grant covers them.
		return []Request{{Op: op, Local: AddrOf(buf), Segment: t.req.Segment, Remote: t.req.Remote + uint64(off), Length: len(buf), Grant: t.req.Grant}}
	}
	if t.req.Op == OpWrite {
		return cuda.Stage(ctx, int(n), a.bufs,
			func(_ context.Context, off int, buf []byte) error {
				return d.CopyToHost(ord, buf, uintptr(addr)+uintptr(off))
			},
			func(ctx context.Context, off int, buf []byte) error { return e.Transfer(ctx, req(OpWrite, off, buf)) })
	}
	return cuda.Stage(ctx, int(n), a.bufs,
		func(ctx context.Context, off int, buf []byte) error { return e.Transfer(ctx, req(OpRead, off, buf)) },
		func(_ context.Context, off int, buf []byte) error {
			return d.CopyFromHost(ord, uintptr(addr)+uintptr(off), buf)
		})
}

// direct copies with the driver alone when the peer is an engine of this
// process using the same driver: device to device without a host round
// trip, or between the device and the peer's host memory.
func (j *deviceJob) direct(t *task, addr uintptr, n, ord int) (bool, error) {
	p, ok := t.seg.peers[0].(*inprocPeer)
	if !ok {
		return false, nil
	}
	mem, err := p.memory()
	if err != nil {
		return true, err
	}
	dm, ok := mem.(*deviceMemory)
	if !ok || dm.d.dev != j.e.devs.dev {
		return false, nil
	}
	sp, err := dm.reg.AcquireAny(t.req.Remote, uint64(n))
	if err != nil {
		return true, err
	}
	if isSource(sp) { // a Source's range: staged through its reads
		sp.Release()
		return false, nil
	}
	defer sp.Release()
	d := j.e.devs.dev
	if raddr, _, rord, isDev := sp.Device(); isDev {
		if t.req.Op == OpWrite {
			return true, d.CopyDevice(rord, uintptr(raddr), ord, addr, n)
		}
		return true, d.CopyDevice(ord, addr, rord, uintptr(raddr), n)
	}
	if t.req.Op == OpWrite {
		return true, d.CopyToHost(ord, sp.B, addr)
	}
	return true, d.CopyFromHost(ord, addr, sp.B)
}

// arena takes a free staging arena or makes one (pinned, registered).
func (s *devState) arena(e *Engine) (*stageArena, error) {
	s.arenaMu.Lock()
	if k := len(s.arenas); k > 0 {
		a := s.arenas[k-1]
		s.arenas = s.arenas[:k-1]
		s.arenaMu.Unlock()
		return a, nil
	}
	s.arenaMu.Unlock()
	chunk, nb := e.cfg.StageChunk, e.cfg.StageBuffers
	mem, err := s.dev.HostAlloc(0, chunk*nb)
	if err != nil {
		return nil, fmt.Errorf("transfer: pinned staging memory: %w", err)
	}
	if _, err := e.reg.Register(mem, stagingLocation, false); err != nil {
		_ = s.dev.HostFree(0, mem)
		return nil, fmt.Errorf("transfer: %w", err)
	}
	a := &stageArena{mem: mem}
	for i := range nb {
		a.bufs = append(a.bufs, mem[i*chunk:(i+1)*chunk:(i+1)*chunk])
	}
	s.arenaMu.Lock()
	s.all = append(s.all, a)
	s.arenaMu.Unlock()
	return a, nil
}

func (s *devState) release(a *stageArena) {
	s.arenaMu.Lock()
	s.arenas = append(s.arenas, a)
	s.arenaMu.Unlock()
}

// stagingLocation tags the pinned staging arenas in the registry: they are
// this engine's own, never listed to peers (published).
const stagingLocation = "cpu:staging"

// published is the registered buffers peers see: all but staging arenas.
func (e *Engine) published() []registry.Buffer {
	bs := e.reg.Buffers()
	if e.devs == nil {
		return bs
	}
	out := bs[:0]
	for _, b := range bs {
		if b.Location != stagingLocation {
			out = append(out, b)
		}
	}
	return out
}

// deviceMemory serves peers' requests on this engine's memory when some of
// it is device memory: host memory as the registry gives it, device memory
// through pinned host buffers (tcp.Stager, inproc.Stager).
type deviceMemory struct {
	reg *registry.Registry
	d   *devState
	e   *Engine // for Sources' ranges (source.go)
}

var _ inproc.Stager = (*deviceMemory)(nil)

func (m *deviceMemory) Acquire(addr, n uint64) (registry.Span, error) { return m.reg.Acquire(addr, n) }

// AcquireRead returns a host copy of device memory.
func (m *deviceMemory) BufferEnd(addr uint64) (uint64, bool) { return m.reg.BufferEnd(addr) }

func (m *deviceMemory) AcquireRead(addr, n uint64) (registry.Span, error) {
	sp, err := m.reg.AcquireAny(addr, n)
	if err != nil {
		return sp, err
	}
	daddr, _, ord, ok := sp.Device()
	if !ok {
		return sp, nil
	}
	if ord == sourceOrdinal {
		return m.e.readSource(sp, addr, n)
	}
	buf, err := m.d.pinned.get(ord, int(n))
	if err == nil {
		err = m.d.dev.CopyToHost(ord, buf, uintptr(daddr))
	}
	if err != nil {
		if buf != nil {
			m.d.pinned.put(buf)
		}
		sp.Release()
		return registry.Span{}, err
	}
	return sp.Staged(buf, func() { m.d.pinned.put(buf) }), nil
}

// AcquireWrite returns a host buffer whose commit copies it to the device.
func (m *deviceMemory) AcquireWrite(addr, n uint64) (registry.Span, func() error, error) {
	sp, err := m.reg.AcquireAny(addr, n)
	if err != nil {
		return sp, nil, err
	}
	daddr, _, ord, ok := sp.Device()
	if !ok {
		return sp, nil, nil
	}
	if ord == sourceOrdinal {
		sp.Release()
		return registry.Span{}, nil, registry.ErrDevice
	}
	buf, err := m.d.pinned.get(ord, int(n))
	if err != nil {
		sp.Release()
		return registry.Span{}, nil, err
	}
	commit := func() error { return m.d.dev.CopyFromHost(ord, uintptr(daddr), buf) }
	return sp.Staged(buf, func() { m.d.pinned.put(buf) }), commit, nil
}

// pinnedPool keeps pinned host buffers by power-of-two size class.
type pinnedPool struct {
	dev  Device
	mu   sync.Mutex
	free map[int][][]byte
	all  [][]byte
}

const minPinned = 64 << 10

func (p *pinnedPool) get(ord, n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("transfer: %w: staging %d bytes", ErrInvalid, n)
	}
	size := max(minPinned, 1<<bits.Len(uint(n-1)))
	p.mu.Lock()
	if l := p.free[size]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[size] = l[:len(l)-1]
		p.mu.Unlock()
		return b[:n], nil
	}
	p.mu.Unlock()
	b, err := p.dev.HostAlloc(ord, size)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.all = append(p.all, b)
	p.mu.Unlock()
	return b[:n], nil
}

func (p *pinnedPool) put(b []byte) {
	b = b[:cap(b)]
	p.mu.Lock()
	if p.free == nil {
		p.free = map[int][][]byte{}
	}
	p.free[len(b)] = append(p.free[len(b)], b)
	p.mu.Unlock()
}

func (p *pinnedPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.all {
		_ = p.dev.HostFree(0, b)
	}
	p.all, p.free = nil, nil
}
