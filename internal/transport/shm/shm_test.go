package shm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type owner struct {
	fd   int
	data []byte
	id   uint64
}

func startServer(t testing.TB, o *owner, secret bool) *Server {
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
	waitfor.Cond(t, 5*time.Second, "the revoke to be applied", func() bool {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return len(cl.maps) == 0
	})
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

// BenchmarkFirstWrite: map a peer's fresh 1.5 MB buffer (pages resident on
// the owner's side, as the KV cache is) and write it once, with populated
// and with lazy mappings; the "warm" case writes an already mapped buffer.
// Reported per iteration: map+write in ns/op, the write alone in write-ns/op.
func BenchmarkFirstWrite(b *testing.B) {
	const n = 1536 << 10
	src := make([]byte, n)
	for _, bc := range []struct {
		name     string
		populate bool
		warm     bool
	}{{"lazy", false, false}, {"populate", true, false}, {"warm", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			defer func(v bool) { populateMappings = v }(populateMappings)
			populateMappings = bc.populate
			ctx := context.Background()
			var writeNS time.Duration
			b.SetBytes(n)
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				fd, data, err := Alloc(n)
				if err != nil {
					b.Fatal(err)
				}
				for j := 0; j < n; j += 4096 {
					data[j] = 1
				}
				s := startServer(b, &owner{fd: fd, data: data, id: uint64(i + 1)}, false)
				cl, err := Dial(ctx, s.Path(), nil)
				if err != nil {
					b.Fatal(err)
				}
				base := registry.AddrOf(data)
				if bc.warm {
					sp, err := cl.Acquire(ctx, base, base, n)
					if err != nil {
						b.Fatal(err)
					}
					copy(sp.B, src)
					sp.Release()
				}
				b.StartTimer()
				sp, err := cl.Acquire(ctx, base, base, n)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				copy(sp.B, src)
				writeNS += time.Since(t0)
				sp.Release()
				b.StopTimer()
				cl.Close()
				s.Close()
				Free(fd, data)
				b.StartTimer()
			}
			b.ReportMetric(float64(writeNS.Nanoseconds())/float64(b.N), "write-ns/op")
		})
	}
}

// TestMappingPopulated: a peer's buffer is mapped with its page tables
// filled (all of it resident in the mapping, per /proc/self/smaps), so the
// first write to a page takes no fault.
func TestMappingPopulated(t *testing.T) {
	const n = 1 << 20
	fd, data, err := Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(fd, data)
	for i := 0; i < n; i += 4096 {
		data[i] = 1 // the owner's pages exist, as a KV cache's do
	}
	s := startServer(t, &owner{fd: fd, data: data, id: 3}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := Dial(ctx, s.Path(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	base := registry.AddrOf(data)
	sp, err := cl.Acquire(ctx, base, base, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Release()
	if rss := smapsRss(t, registry.AddrOf(sp.B)); rss < n {
		t.Fatalf("mapping has %d bytes resident of %d: not populated", rss, n)
	}
}

// smapsRss returns the Rss of the mapping starting at addr.
func smapsRss(t *testing.T, addr uint64) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, _, _ := strings.Cut(f[0], "-")
			v, err := strconv.ParseUint(lo, 16, 64)
			in = err == nil && v == addr
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			return kb << 10
		}
	}
	t.Fatalf("mapping %#x not in smaps", addr)
	return 0
}
