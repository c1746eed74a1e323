package transfer

import (
	"fmt"

	"github.com/kvcache-go/mooncake/internal/transport/shm"
)

// managedBuf is an engine-allocated memfd mapping.
type managedBuf struct {
	fd   int
	data []byte
}

// AllocateManaged allocates length bytes backed by a memfd, maps them, and
// registers them as shareable: same-host peers map the same pages and copy
// with one memcpy (the shm transport). Free with FreeManaged.
func (e *Engine) AllocateManaged(length int) ([]byte, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if length <= 0 {
		return nil, fmt.Errorf("transfer: allocate %d bytes: %w", length, ErrInvalid)
	}
	fd, data, err := shm.Alloc(length)
	if err != nil {
		return nil, fmt.Errorf("transfer: %w", err)
	}
	buf, err := e.reg.Register(data, "cpu:managed", true)
	if err != nil {
		shm.Free(fd, data)
		return nil, fmt.Errorf("transfer: %w", err)
	}
	e.managedMu.Lock()
	e.managed[buf.Addr] = &managedBuf{fd: fd, data: data}
	e.managedMu.Unlock()
	e.republish()
	return data, nil
}

// FreeManaged unregisters and unmaps a buffer from AllocateManaged (waiting
// for transfers still using it, and revoking peers' shared mappings).
func (e *Engine) FreeManaged(b []byte) error {
	addr := uint64(AddrOf(b))
	e.managedMu.Lock()
	m, ok := e.managed[addr]
	delete(e.managed, addr)
	e.managedMu.Unlock()
	if !ok {
		return fmt.Errorf("transfer: free managed %#x: %w", addr, ErrNotRegistered)
	}
	buf, err := e.reg.Unregister(addr)
	if err == nil {
		e.revokeShared(buf.ID)
	}
	e.republish()
	shm.Free(m.fd, m.data)
	return err
}

// ManagedDataRanges returns the parts of b, a buffer from AllocateManaged,
// that have been written: [start, end) offsets into b, in order, page
// granular. The rest reads as zeros, and reading it would allocate its
// pages (a memfd's untouched pages are allocated by any fault, a read
// too), so a scan of b reads only these ranges.
func (e *Engine) ManagedDataRanges(b []byte) ([][2]int, error) {
	addr := uint64(AddrOf(b))
	e.managedMu.Lock()
	defer e.managedMu.Unlock() // FreeManaged closes the fd after removing it
	m, ok := e.managed[addr]
	if !ok || len(b) != len(m.data) {
		return nil, fmt.Errorf("transfer: data ranges of %#x: %w", addr, ErrNotRegistered)
	}
	rs, err := shm.DataRanges(m.fd, int64(len(b)))
	if err != nil {
		return nil, fmt.Errorf("transfer: %w", err)
	}
	out := make([][2]int, len(rs))
	for i, r := range rs {
		out[i] = [2]int{int(r[0]), int(r[1])}
	}
	return out, nil
}

func (e *Engine) freeAllManaged() {
	e.managedMu.Lock()
	all := e.managed
	e.managed = map[uint64]*managedBuf{}
	e.managedMu.Unlock()
	for addr, m := range all {
		_, _ = e.reg.Unregister(addr)
		shm.Free(m.fd, m.data)
	}
}
