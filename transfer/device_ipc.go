package transfer

import (
	"context"
	"encoding/hex"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/cuda"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// ipcDevice is a Device that can share allocations between processes of a
// host (CUDA IPC): *cuda.Driver is one.
type ipcDevice interface {
	IPCHandleOf(dev int, p uintptr) (cuda.IPCHandle, error)
	IPCOpen(dev int, h cuda.IPCHandle) (uintptr, error)
	IPCClose(dev int, p uintptr) error
}

var _ ipcDevice = (*cuda.Driver)(nil)

type ipcExport struct {
	handle string // hex
	base   uint64
}

type ipcOpened struct {
	base uintptr
	dev  int
}

type ipcState struct {
	mu       sync.Mutex
	exported map[uint64]ipcExport // by registered buffer address
	opened   map[string]ipcOpened // peers' allocations, by handle
	// index holds, per peer segment, the device buffers its descriptor
	// offers over IPC, sorted by address, for the descriptor it was made of.
	index map[*segment]ipcIndex
}

type ipcIndex struct {
	desc time.Time // seg.descAt of the descriptor indexed
	bufs []wire.Buffer
}

// ipcBuffer returns the IPC-offered device buffer of seg's descriptor d
// (fetched at descAt) that holds [remote, remote+n), if any.
func (s *ipcState) ipcBuffer(seg *segment, d wire.Segment, descAt time.Time, remote, n uint64) (wire.Buffer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ix, ok := s.index[seg]
	if !ok || !ix.desc.Equal(descAt) {
		ix = ipcIndex{desc: descAt}
		for _, b := range d.Buffers {
			if b.CUDAIPC != "" {
				ix.bufs = append(ix.bufs, b)
			}
		}
		sort.Slice(ix.bufs, func(i, j int) bool { return ix.bufs[i].Addr < ix.bufs[j].Addr })
		if s.index == nil {
			s.index = map[*segment]ipcIndex{}
		}
		s.index[seg] = ix
	}
	i := sort.Search(len(ix.bufs), func(i int) bool { return ix.bufs[i].Addr > remote }) - 1
	if i < 0 {
		return wire.Buffer{}, false
	}
	b := ix.bufs[i]
	if remote-b.Addr >= b.Length || n > b.Addr+b.Length-remote {
		return wire.Buffer{}, false
	}
	return b, true
}

// exportIPC records the IPC handle of the allocation (base) holding a newly
// registered device buffer, for the descriptor. Memory the driver cannot
// share (not from cuMemAlloc) is simply not offered: peers use staging.
func (e *Engine) exportIPC(addr uintptr, ord int, base uintptr) {
	d, ok := e.devs.dev.(ipcDevice)
	if !ok {
		return
	}
	h, err := d.IPCHandleOf(ord, base)
	if err != nil {
		e.log.Debug("transfer: device buffer not shareable over CUDA IPC", "addr", addr, "err", err)
		return
	}
	s := &e.devs.ipc
	s.mu.Lock()
	if s.exported == nil {
		s.exported = map[uint64]ipcExport{}
	}
	s.exported[uint64(addr)] = ipcExport{handle: hex.EncodeToString(h.Reserved[:]), base: uint64(base)}
	s.mu.Unlock()
}

// describeDevice adds a device buffer's IPC handle to its description.
func (e *Engine) describeDevice(b *wire.Buffer) {
	if e.devs == nil {
		return
	}
	s := &e.devs.ipc
	s.mu.Lock()
	x, ok := s.exported[b.Addr]
	s.mu.Unlock()
	if ok {
		b.CUDAIPC, b.AllocBase = x.handle, x.base
	}
}

func (e *Engine) closeIPC() {
	d, ok := e.devs.dev.(ipcDevice)
	s := &e.devs.ipc
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.opened {
		if ok {
			_ = d.IPCClose(o.dev, o.base)
		}
	}
	s.opened, s.exported, s.index = nil, nil, nil
}

// open returns the local base of a peer's allocation, opening it once.
func (s *ipcState) open(d ipcDevice, handle string, dev int) (uintptr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.opened[handle]; ok {
		return o.base, nil
	}
	var h cuda.IPCHandle
	if _, err := hex.Decode(h.Reserved[:], []byte(handle)); err != nil || len(handle) != 2*len(h.Reserved) {
		return 0, ErrInvalid
	}
	p, err := d.IPCOpen(dev, h)
	if err != nil {
		return 0, err
	}
	if s.opened == nil {
		s.opened = map[string]ipcOpened{}
	}
	s.opened[handle] = ipcOpened{base: p, dev: dev}
	return p, nil
}

// ipcJobFor returns a job that copies with the driver alone when the
// remote range is device memory of a peer on this host that published its
// IPC handle (transports auto and shm): device to device without a host
// round trip, or between the peer's device memory and local host memory.
// A peer in this very process is reached at its own addresses. nil: the
// task goes the usual way.
func (e *Engine) ipcJobFor(t *task) job {
	d, ok := e.devs.dev.(ipcDevice)
	if !ok {
		return nil
	}
	if _, ok := e.transports[0].(*shmTransport); !ok {
		return nil
	}
	t.seg.mu.Lock()
	desc, descAt := t.seg.desc, t.seg.descAt
	t.seg.mu.Unlock()
	if desc.HostID != e.hostID {
		return nil
	}
	remote := t.req.Remote
	b, ok := e.devs.ipc.ipcBuffer(t.seg, desc, descAt, remote, uint64(t.req.Length))
	if !ok {
		return nil
	}
	dev := locationOrdinal(b.Location)
	at := uintptr(remote) // a peer in this process: its own addresses
	if desc.PID != os.Getpid() {
		base, err := e.devs.ipc.open(d, b.CUDAIPC, dev)
		if err != nil {
			e.log.Debug("transfer: CUDA IPC open failed, staging instead", "peer", t.seg.name, "err", err)
			return nil
		}
		at = base + uintptr(remote-b.AllocBase)
	}
	return &ipcJob{d: e.devs.dev, at: at, dev: dev}
}

// locationOrdinal reads N from "cuda:N" (0 otherwise).
func locationOrdinal(loc string) int {
	if s, ok := strings.CutPrefix(loc, "cuda:"); ok {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			return n
		}
	}
	return 0
}

// ipcJob is one driver copy between local memory and a peer's device
// memory opened here (at, on device dev).
type ipcJob struct {
	d   Device
	at  uintptr
	dev int
}

func (j *ipcJob) slices() int { return 1 }
func (j *ipcJob) async() bool { return false }
func (j *ipcJob) abort(error) {}
func (j *ipcJob) drop()       {}

func (j *ipcJob) run(_ context.Context, b *Batch, t *task) {
	var err error
	laddr, n, lord, dev := t.local.Device()
	switch {
	case dev && t.req.Op == OpWrite:
		err = j.d.CopyDevice(j.dev, j.at, lord, uintptr(laddr), int(n))
	case dev:
		err = j.d.CopyDevice(lord, uintptr(laddr), j.dev, j.at, int(n))
	case t.req.Op == OpWrite:
		err = j.d.CopyFromHost(j.dev, j.at, t.local.B)
	default:
		err = j.d.CopyToHost(j.dev, t.local.B, j.at)
	}
	b.sliceDone(t, err)
}
