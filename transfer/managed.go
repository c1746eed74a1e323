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
