package transfer

import (
	"fmt"

	"golang.org/x/sys/unix"
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
	fd, err := unix.MemfdCreate("mooncake-go", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("transfer: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(length)); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("transfer: ftruncate memfd: %w", err)
	}
	data, err := unix.Mmap(fd, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("transfer: mmap memfd: %w", err)
	}
	buf, err := e.reg.Register(data, "cpu:managed", true)
	if err != nil {
		_ = unix.Munmap(data)
		_ = unix.Close(fd)
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
	_ = unix.Munmap(m.data)
	_ = unix.Close(m.fd)
	return err
}

// managedFD returns the memfd and length of the managed buffer with registry id.
func (e *Engine) managedFD(addr uint64) (int, int, bool) {
	e.managedMu.Lock()
	defer e.managedMu.Unlock()
	m, ok := e.managed[addr]
	if !ok {
		return -1, 0, false
	}
	return m.fd, len(m.data), true
}

func (e *Engine) freeAllManaged() {
	e.managedMu.Lock()
	all := e.managed
	e.managed = map[uint64]*managedBuf{}
	e.managedMu.Unlock()
	for addr, m := range all {
		_, _ = e.reg.Unregister(addr)
		_ = unix.Munmap(m.data)
		_ = unix.Close(m.fd)
	}
}
