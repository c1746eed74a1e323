package transfer

import (
	"errors"
	"fmt"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// Source stands behind a registered range of this engine's address space
// that is not memory: a storage node's disk tier registers one, so that
// peers read its objects with ordinary READ requests on the same lanes
// (and with the same bounds checks, grants and per-slice checksums) as
// memory replicas. The lane that serves a READ of the range asks the
// source for the bytes; WRITEs to it are refused.
type Source interface {
	// ReadAt returns the n bytes at addr, which lies inside the
	// registered range, and a release for them (called once the bytes
	// were sent). An error answers the slice as rejected.
	ReadAt(addr, n uint64) (b []byte, release func(), err error)
}

// Prefetcher is a Source that reads ahead: a TCP lane serving its range
// tells it, before the READ it is about to serve, the ranges that READ and
// the READs queued behind it on the lane ask for, in order (each inside
// the registered range, covered by the lane's grants, not yet served), so
// it can start reading them while the lane sends. A hint is no promise:
// ranges never asked for must be let go. Prefetch must not block, nor keep
// ranges past its return.
type Prefetcher interface {
	Source
	Prefetch(ranges []Range)
}

// Range is a range of addresses, [Addr, Addr+Len).
type Range struct{ Addr, Len uint64 }

// sourceOrdinal marks a registry entry as a Source's range: device-like
// (the host cannot view it as bytes), served through the source.
const sourceOrdinal = -2

// RegisterSource registers [addr, addr+length) as served by src. The range
// must not overlap registered memory; pick addresses no process maps (a
// disk tier takes them above 2^62). It is published like memory (Location
// location), and released with Unregister(addr).
func (e *Engine) RegisterSource(addr, length uint64, location string, src Source) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if src == nil || addr == 0 || length == 0 {
		return fmt.Errorf("transfer: register source %#x+%d: %w", addr, length, ErrInvalid)
	}
	b, err := e.reg.RegisterDevice(addr, length, location, sourceOrdinal)
	if err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	e.sources.Store(b.ID, src)
	e.republish()
	return nil
}

// sourceMemory is what lanes serving this engine see when it has no
// device: the registry, and the ranges of Sources read through them
// (tcp.Stager, inproc.Stager).
type sourceMemory struct{ e *Engine }

func (m sourceMemory) Acquire(addr, n uint64) (registry.Span, error) { return m.e.reg.Acquire(addr, n) }

func (m sourceMemory) BufferEnd(addr uint64) (uint64, bool) { return m.e.reg.BufferEnd(addr) }

func (m sourceMemory) AcquireRead(addr, n uint64) (registry.Span, error) {
	sp, err := m.e.reg.Acquire(addr, n)
	if !errors.Is(err, registry.ErrDevice) {
		return sp, err
	}
	sp, err = m.e.reg.AcquireAny(addr, n)
	if err != nil {
		return sp, err
	}
	return m.e.readSource(sp, addr, n)
}

// Prefetch passes the ranges of queued READs (tcp.Prefetcher) that lie in
// a Source's range to that Source, when it is a Prefetcher: consecutive
// ranges of one source in one call, in order.
func (m sourceMemory) Prefetch(ext []wire.Extent) {
	if !m.e.hasSources() {
		return
	}
	var (
		cur   Prefetcher
		curID uint64
		rs    []Range
	)
	for _, x := range ext {
		b, ok := m.e.reg.Lookup(x.Addr)
		if !ok || !b.Device || b.Ordinal != sourceOrdinal || x.Addr+x.Length < x.Addr || x.Addr+x.Length > b.Addr+b.Length {
			continue
		}
		if cur == nil || b.ID != curID {
			if cur != nil {
				cur.Prefetch(rs)
				rs = rs[:0]
			}
			src, _ := m.e.sources.Load(b.ID)
			pf, ok := src.(Prefetcher)
			if !ok {
				cur = nil
				continue
			}
			cur, curID = pf, b.ID
		}
		rs = append(rs, Range{x.Addr, x.Length})
	}
	if cur != nil && len(rs) > 0 {
		cur.Prefetch(rs)
	}
}

// hasSources reports whether any Source is registered (lanes of engines
// without one skip the look-ups of Prefetch).
func (e *Engine) hasSources() bool {
	found := false
	e.sources.Range(func(_, _ any) bool { found = true; return false })
	return found
}

func (m sourceMemory) AcquireWrite(addr, n uint64) (registry.Span, func() error, error) {
	sp, err := m.e.reg.Acquire(addr, n)
	return sp, nil, err
}

// readSource serves a READ of a device-like span: from its Source, or
// refused (device memory without a driver).
func (e *Engine) readSource(sp registry.Span, addr, n uint64) (registry.Span, error) {
	src, ok := e.sources.Load(sp.BufferID())
	if !ok {
		sp.Release()
		return registry.Span{}, registry.ErrDevice
	}
	b, release, err := src.(Source).ReadAt(addr, n)
	if err == nil && uint64(len(b)) != n {
		release()
		err = fmt.Errorf("transfer: source read %d of %d bytes", len(b), n)
	}
	if err != nil {
		sp.Release()
		return registry.Span{}, err
	}
	return sp.Staged(b, release), nil
}

// isSource reports whether a device-like span is a Source's range.
func isSource(sp registry.Span) bool {
	_, _, ord, ok := sp.Device()
	return ok && ord == sourceOrdinal
}
