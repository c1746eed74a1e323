package registry

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestAcquireBounds(t *testing.T) {
	g := New()
	// Two adjacent buffers carved from one allocation, and one separate.
	backing := make([]byte, 8192)
	a, b := backing[:4096:4096], backing[4096:]
	if _, err := g.Register(a, "cpu:0", false); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Register(b, "", false); err != nil {
		t.Fatal(err)
	}
	base := AddrOf(a)
	tests := []struct {
		name string
		addr uint64
		n    uint64
		want error
	}{
		{"exact first", base, 4096, nil},
		{"inside", base + 10, 100, nil},
		{"exact second", base + 4096, 4096, nil},
		{"zero length", base, 0, ErrOutOfBounds},
		{"past end of first spans adjacent", base + 4000, 200, ErrOutOfBounds},
		{"whole backing spans two buffers", base, 8192, ErrOutOfBounds},
		{"past end of second", base + 8000, 193, ErrOutOfBounds},
		{"before first", base - 1, 2, ErrNotRegistered},
		{"after all", base + 8192, 1, ErrNotRegistered},
		{"overflow", base + 1, math.MaxUint64, ErrOutOfBounds},
		{"null", 0, 1, ErrNotRegistered},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := g.Acquire(tc.addr, tc.n)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				if uint64(len(s.B)) != tc.n || AddrOf(s.B) != tc.addr {
					t.Fatalf("span %#x+%d, want %#x+%d", AddrOf(s.B), len(s.B), tc.addr, tc.n)
				}
				s.Release()
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRegisterRejects(t *testing.T) {
	g := New()
	buf := make([]byte, 100)
	if _, err := g.Register(buf[10:50], "", false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", buf[:0], ErrOutOfBounds},
		{"same", buf[10:50], ErrOverlap},
		{"overlap start", buf[0:11], ErrOverlap},
		{"overlap end", buf[49:60], ErrOverlap},
		{"contains", buf[0:100], ErrOverlap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := g.Register(tc.b, "", false); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := g.Register(buf[50:60], "", false); err != nil {
		t.Fatalf("adjacent register: %v", err)
	}
	if got := len(g.Buffers()); got != 2 {
		t.Fatalf("buffers = %d, want 2", got)
	}
}

func TestUnregisterWaitsForSpans(t *testing.T) {
	g := New()
	buf := make([]byte, 64)
	if _, err := g.Register(buf, "", false); err != nil {
		t.Fatal(err)
	}
	s, err := g.Acquire(AddrOf(buf), 8)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := g.Unregister(AddrOf(buf)); err != nil {
			t.Error(err)
		}
		close(done)
	}()
	// New acquires fail as soon as the buffer is gone from the table; poll
	// until the unregister has removed it.
	waitfor.Cond(t, 10*time.Second, "Unregister to remove the buffer", func() bool {
		s2, err := g.Acquire(AddrOf(buf), 8)
		if errors.Is(err, ErrNotRegistered) {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		s2.Release() // still registered: the goroutine has not run yet
		return false
	})
	select {
	case <-done:
		t.Fatal("Unregister returned while a span was held")
	default:
	}
	s.Release()
	wg.Wait()
	if _, err := g.Unregister(AddrOf(buf)); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("second unregister: %v", err)
	}
}

func TestDeviceBuffers(t *testing.T) {
	g := New()
	const base = 0x7f0000000000 // a device address: never dereferenced here
	b, err := g.RegisterDevice(base, 1<<20, "cuda:1", 1)
	if err != nil || !b.Device || b.Ordinal != 1 || b.Location != "cuda:1" {
		t.Fatalf("RegisterDevice = %+v, %v", b, err)
	}
	if _, err := g.RegisterDevice(base+4096, 16, "", 0); !errors.Is(err, ErrOverlap) {
		t.Fatalf("overlapping device registration: %v", err)
	}
	if _, err := g.RegisterDevice(0, 16, "", 0); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("null device address: %v", err)
	}
	// Acquire refuses device memory: a host view of it would crash.
	if _, err := g.Acquire(base, 16); !errors.Is(err, ErrDevice) {
		t.Fatalf("Acquire of device memory: %v", err)
	}
	sp, err := g.AcquireAny(base+100, 200)
	if err != nil {
		t.Fatal(err)
	}
	if addr, n, ord, ok := sp.Device(); !ok || addr != base+100 || n != 200 || ord != 1 || sp.B != nil {
		t.Fatalf("device span = %#x %d %d %v, B %v", addr, n, ord, ok, sp.B != nil)
	}
	// The same bounds as host memory.
	if _, err := g.AcquireAny(base+1<<20-10, 20); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("device range past its buffer: %v", err)
	}
	// A staged view keeps the buffer acquired until released.
	released := false
	st := sp.Staged(make([]byte, 200), func() { released = true })
	if _, _, _, ok := st.Device(); !ok || len(st.B) != 200 {
		t.Fatal("staged span lost its buffer or bytes")
	}
	done := make(chan struct{})
	go func() { _, _ = g.Unregister(base); close(done) }()
	waitfor.Cond(t, 10*time.Second, "Unregister to remove the device buffer", func() bool {
		sp, err := g.AcquireAny(base, 8)
		if err == nil {
			sp.Release() // still registered: the goroutine has not run yet
		}
		return errors.Is(err, ErrNotRegistered)
	})
	select {
	case <-done:
		t.Fatal("Unregister returned while a staged span was held")
	default:
	}
	st.Release()
	<-done
	if !released {
		t.Fatal("Release did not run the staged span's fin")
	}
	// Host spans report no device.
	h := make([]byte, 64)
	if _, err := g.Register(h, "cpu:0", false); err != nil {
		t.Fatal(err)
	}
	hs, err := g.AcquireAny(AddrOf(h), 64)
	if err != nil || len(hs.B) != 64 {
		t.Fatalf("AcquireAny of host memory: %v", err)
	}
	if _, _, _, ok := hs.Device(); ok {
		t.Fatal("host span reports device memory")
	}
	hs.Release()
}
