package transfer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/transport/shm"
)

// shmState is this engine's shared-memory server.
type shmState struct {
	srv  *shm.Server
	path string
}

// shmTarget is one task's view into a peer's mapped buffer.
type shmTarget struct{ span shm.Span }

func (t *shmTarget) copy(write bool, local []byte, _ uint64) error {
	if write {
		copy(t.span.B, local)
	} else {
		copy(local, t.span.B)
	}
	t.span.Release()
	return nil
}

func (t *shmTarget) release() { t.span.Release() }

func (e *Engine) startShm() error {
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("mooncake-go-%d-%d-%s", os.Getpid(), e.port, hex.EncodeToString(r[:]))
	srv, err := shm.Listen(name, e.shmLookup, e.checkAuth, e.log)
	if err != nil {
		// No unix sockets here: same-host peers will use TCP.
		e.log.Warn("transfer: shared memory unavailable", "err", err)
		return nil
	}
	e.shm = &shmState{srv: srv, path: srv.Path()}
	return nil
}

func (e *Engine) stopShm() {
	if e.shm != nil {
		e.shm.srv.Close()
	}
}

func (e *Engine) revokeShared(id uint64) {
	if e.shm != nil {
		e.shm.srv.Revoke(id)
	}
}

// shmLookup answers a peer's map request: the managed buffer containing addr.
func (e *Engine) shmLookup(addr uint64) (shm.BufInfo, int, error) {
	b, ok := e.reg.Lookup(addr)
	if !ok || !b.Shareable {
		return shm.BufInfo{}, -1, fmt.Errorf("%#x: %w", addr, shm.ErrNotShareable)
	}
	e.managedMu.Lock()
	defer e.managedMu.Unlock()
	m, ok := e.managed[b.Addr]
	if !ok {
		return shm.BufInfo{}, -1, fmt.Errorf("%#x: %w", addr, shm.ErrNotShareable)
	}
	fd, err := unix.FcntlInt(uintptr(m.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return shm.BufInfo{}, -1, fmt.Errorf("dup memfd: %w", err)
	}
	return shm.BufInfo{Addr: b.Addr, Length: b.Length, ID: b.ID}, fd, nil
}

// shmTargetFor returns a mapped view of the peer's [remote, remote+n) when
// the peer is on this host and the buffer is shareable; nil means use TCP.
// unknown says the range lies in no buffer of the cached descriptor.
func (e *Engine) shmTargetFor(seg *segment, remote, n uint64) (_ *shmTarget, unknown bool) {
	if e.shm == nil {
		return nil, false
	}
	seg.mu.Lock()
	defer seg.mu.Unlock()
	d := &seg.desc
	if seg.shmFailed || d.ShmSocket == "" || d.HostID != e.hostID {
		return nil, false
	}
	var base uint64
	found, known := false, false
	for _, b := range d.Buffers {
		if remote >= b.Addr && remote+n >= remote && remote+n <= b.Addr+b.Length {
			known = true
			if b.Shareable {
				base, found = b.Addr, true
			}
			break
		}
	}
	if !found {
		return nil, !known
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.HandshakeTimeout)
	defer cancel()
	if seg.shm == nil {
		cl, err := shm.Dial(ctx, d.ShmSocket, e.auth())
		if err != nil {
			e.log.Warn("transfer: shared memory to peer unavailable, using tcp", "peer", seg.name, "err", err)
			seg.shmFailed = true
			return nil, false
		}
		seg.shm = cl
	}
	sp, err := seg.shm.Acquire(ctx, base, remote, n)
	if err != nil {
		if !errors.Is(err, shm.ErrNotShareable) && !errors.Is(err, shm.ErrOutOfBounds) {
			seg.shm.Close()
			seg.shm = nil
		}
		return nil, false
	}
	return &shmTarget{span: sp}, false
}
