package shm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type owner struct {
	fd   int
	data []byte
	id   uint64
}

func startServer(t *testing.T, o *owner, secret bool) *Server {
	lookup := func(addr uint64) (BufInfo, int, error) {
		base := registry.AddrOf(o.data)
		if addr < base || addr >= base+uint64(len(o.data)) {
			return BufInfo{}, -1, ErrNotShareable
		}
		fd, err := unix.FcntlInt(uintptr(o.fd), unix.F_DUPFD_CLOEXEC, 0)
		return BufInfo{Addr: base, Length: uint64(len(o.data)), ID: o.id}, fd, err
	}
	auth := func(a *wire.Auth) bool { return !secret || (a != nil && string(a.MAC) == "ok") }
	s, err := Listen(fmt.Sprintf("shm-test-%d-%d", os.Getpid(), time.Now().UnixNano()), lookup, auth, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestMapCopyRevoke(t *testing.T) {
	fd, data, err := Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(fd, data)
	o := &owner{fd: fd, data: data, id: 7}
	s := startServer(t, o, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := Dial(ctx, s.Path(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	base := registry.AddrOf(data)
	sp, err := cl.Acquire(ctx, base, base+100, 5)
	if err != nil {
		t.Fatal(err)
	}
	copy(sp.B, "hello")
	sp.Release()
	if string(data[100:105]) != "hello" {
		t.Fatal("write through the mapping not visible to the owner")
	}
	for _, c := range []struct{ addr, n uint64 }{{base, 0}, {base + (1 << 20) - 1, 2}, {base - 1, 1}, {base + 1, ^uint64(0)}} {
		if _, err := cl.Acquire(ctx, base, c.addr, c.n); !errors.Is(err, ErrOutOfBounds) {
			t.Fatalf("%#x+%d: %v", c.addr, c.n, err)
		}
	}
	if _, err := cl.Acquire(ctx, base+(2<<20), base+(2<<20), 1); !errors.Is(err, ErrNotShareable) {
		t.Fatalf("unshared: %v", err)
	}
	held, err := cl.Acquire(ctx, base, base, 1)
	if err != nil {
		t.Fatal(err)
	}
	s.Revoke(7)
	deadline := time.Now().Add(5 * time.Second)
	for {
		cl.mu.Lock()
		n := len(cl.maps)
		cl.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("revoke not applied")
		}
		time.Sleep(time.Millisecond)
	}
	held.B[0] = 1 // still mapped while held
	held.Release()
}

func TestAuth(t *testing.T) {
	fd, data, err := Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(fd, data)
	s := startServer(t, &owner{fd: fd, data: data, id: 1}, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Dial(ctx, s.Path(), &wire.Auth{MAC: []byte("bad")}); !errors.Is(err, ErrAuth) {
		t.Fatalf("bad secret: %v", err)
	}
	if _, err := Dial(ctx, s.Path(), nil); !errors.Is(err, ErrAuth) {
		t.Fatalf("no secret: %v", err)
	}
	cl, err := Dial(ctx, s.Path(), &wire.Auth{MAC: []byte("ok")})
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
}

func FuzzDecodeMsg(f *testing.F) {
	f.Add([]byte(`{"map":4096}`))
	f.Add([]byte(`{"ok":true,"buf":{"addr":4096,"length":10,"id":1}}`))
	f.Add([]byte(`{"revoke":3}`))
	f.Add([]byte(`{"buf":{"addr":18446744073709551615,"length":10}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeMsg(in)
		if err != nil {
			return
		}
		if b := m.Buf; b != nil && (b.Length == 0 || b.Addr == 0 || b.Addr+b.Length < b.Addr) {
			t.Fatalf("accepted %+v", *b)
		}
	})
}
