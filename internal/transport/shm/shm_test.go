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
	cl, err := Dial(ctx, s.Path(), nil, DialOptions{})
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
	if _, err := Dial(ctx, s.Path(), &wire.Auth{MAC: []byte("bad")}, DialOptions{}); !errors.Is(err, ErrAuth) {
		t.Fatalf("bad secret: %v", err)
	}
	if _, err := Dial(ctx, s.Path(), nil, DialOptions{}); !errors.Is(err, ErrAuth) {
		t.Fatalf("no secret: %v", err)
	}
	cl, err := Dial(ctx, s.Path(), &wire.Auth{MAC: []byte("ok")}, DialOptions{})
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

// TestMappingPolicy: a peer's buffer is mapped lazily, so a first copy
// leaves only the pages it touched resident, in the client's mapping (per
// /proc/self/smaps) and in the owner's memfd (per mincore), however large
// the buffer and whether or not the owner's pages exist; a long span is
// populated, in whole chunks, when it is handed out.
func TestMappingPolicy(t *testing.T) {
	const page = 4096
	for _, tc := range []struct {
		name     string
		size     int    // the peer's buffer
		off, n   uint64 // the span acquired
		ownerPre bool   // the owner wrote every page first (a full KV cache)
		// bounds on the client mapping's resident bytes, and on the
		// owner's memfd bytes in memory, after copying into the span
		mapMin, mapMax, ownMax int
	}{
		{"short-span", 2 << 30, 1 << 30, 64, false, page, 16 * page, 2 * page},
		{"long-span", 2 << 30, 512<<20 + 100, 256 << 10, false, 256 << 10, 256<<10 + 2*chunk, 256<<10 + 2*chunk + page},
		{"owner-full", 64 << 20, 32<<20 + 100, 256 << 10, true, 256 << 10, 256<<10 + 2*chunk, 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, data, err := Alloc(tc.size)
			if err != nil {
				t.Fatal(err)
			}
			defer Free(fd, data)
			data[0] = 1
			smallPages(t, data)
			if tc.ownerPre {
				for i := 0; i < len(data); i += page {
					data[i] = 1
				}
			}
			s := startServer(t, &owner{fd: fd, data: data, id: 3}, false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cl, err := Dial(ctx, s.Path(), nil, DialOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			base := registry.AddrOf(data)
			sp, err := cl.Acquire(ctx, base, base+tc.off, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Release()
			mbase := registry.AddrOf(sp.B) - tc.off // the client's mapping
			if tc.n >= 64<<10 {
				if r := smapsRss(t, mbase); r < int(tc.n) {
					t.Errorf("long span not populated when handed out: %d bytes resident", r)
				}
			}
			for i := range sp.B {
				sp.B[i] = 2
			}
			if data[tc.off] != 2 || data[tc.off+tc.n-1] != 2 {
				t.Fatal("the copy did not reach the owner's memory")
			}
			mapped := smapsRss(t, mbase)
			if mapped < tc.mapMin || mapped > tc.mapMax {
				t.Errorf("client mapping: %d bytes resident, want %d to %d", mapped, tc.mapMin, tc.mapMax)
			}
			own, err := Resident(data)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.ownerPre && own > tc.ownMax {
				t.Errorf("owner's memfd: %d of %d bytes in memory, want at most %d", own, tc.size, tc.ownMax)
			}
		})
	}
}

// TestDataRanges: a 1 GiB memfd written in three places has exactly those
// pages as data, and finding them reads nothing else.
func TestDataRanges(t *testing.T) {
	const size, page = 1 << 30, 4096
	fd, data, err := Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(fd, data)
	if rs, err := DataRanges(fd, size); err != nil || len(rs) != 0 {
		t.Fatalf("fresh memfd: %v %v", rs, err)
	}
	data[5<<20+10] = 1
	smallPages(t, data)
	copy(data[700<<20-100:], make([]byte, 200)) // two pages, zeros written are data
	data[size-1] = 1
	want := [][2]int64{{5 << 20, 5<<20 + page}, {700<<20 - page, 700<<20 + page}, {size - page, size}}
	rs, err := DataRanges(fd, size)
	if err != nil || fmt.Sprint(rs) != fmt.Sprint(want) {
		t.Fatalf("data ranges %v (%v), want %v", rs, err, want)
	}
	want = [][2]int64{{5 << 20, 5<<20 + page}, {700<<20 - page, 700 << 20}} // cut at the size asked
	if rs, err := DataRanges(fd, 700<<20); err != nil || fmt.Sprint(rs) != fmt.Sprint(want) {
		t.Fatalf("first 700 MiB: %v (%v), want %v", rs, err, want)
	}
	if r, err := Resident(data); err != nil || r != 4*page {
		t.Fatalf("%d bytes resident (%v), want %d", r, err, 4*page)
	}
}

// smallPages checks that the one page written to data, a fresh memfd's
// mapping, is all of it in memory, and skips the test where shared memory
// comes in huge pages (transparent huge pages for shmem): its bounds count
// 4 KiB pages.
func smallPages(t *testing.T, data []byte) {
	t.Helper()
	r, err := Resident(data)
	if err != nil {
		t.Fatal(err)
	}
	if r > 4096 && r <= 2<<20 {
		t.Skipf("one byte written allocated %d bytes: shared memory comes in huge pages here", r)
	}
	if r != 4096 {
		t.Fatalf("fresh memfd with one page written: %d bytes in memory, want 4096", r)
	}
}

// policy sets the mapping policy for one benchmark and returns the
// options its clients dial with.
func policy(b *testing.B, whole bool, spanMin uint64) DialOptions {
	oldMin := spanPopulateMin
	spanPopulateMin = spanMin
	b.Cleanup(func() { spanPopulateMin = oldMin })
	return DialOptions{PopulateWhole: whole}
}

// policies compared by the benchmarks: "populate" maps every buffer with
// MAP_POPULATE, "lazy" maps every buffer lazily and copies fault page by
// page, "span" is the package's policy (lazy mapping, spans populated).
var policies = []struct {
	name    string
	whole   bool
	spanMin uint64
}{
	{"populate", true, 1 << 62},
	{"lazy", false, 1 << 62},
	{"span", false, spanPopulateMin},
}

// BenchmarkFirstOp: a new client's first operation on a peer buffer of 64
// MiB, 1 GiB and 4 GiB: dial, map, and write a 1.5 MB object at the
// middle of the buffer, whose pages the owner holds already. Reported per
// iteration: ns/op for all of it, the write alone in write-ns/op, and the
// owner's memfd bytes in memory afterwards in owner-MiB (what populating
// allocates on the owner's side). The "populate" runs of the larger sizes
// allocate the whole buffer: run with -benchtime=Nx.
func BenchmarkFirstOp(b *testing.B) {
	const n = 1536 << 10
	src := make([]byte, n)
	for _, size := range []int{n, 64 << 20, 1 << 30, 4 << 30} {
		for _, pc := range policies {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, pc.name), func(b *testing.B) {
				opt := policy(b, pc.whole, pc.spanMin)
				ctx := context.Background()
				var writeNS time.Duration
				var ownMiB float64
				b.SetBytes(n)
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					fd, data, err := Alloc(size)
					if err != nil {
						b.Fatal(err)
					}
					obj := data[(size-n)/2 : (size+n)/2]
					for j := 0; j < n; j += 4096 {
						obj[j] = 1
					}
					s := startServer(b, &owner{fd: fd, data: data, id: uint64(i + 1)}, false)
					base := registry.AddrOf(data)
					b.StartTimer()
					cl, err := Dial(ctx, s.Path(), nil, opt)
					if err != nil {
						b.Fatal(err)
					}
					sp, err := cl.Acquire(ctx, base, registry.AddrOf(obj), n)
					if err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					copy(sp.B, src)
					writeNS += time.Since(t0)
					sp.Release()
					b.StopTimer()
					own, err := Resident(data)
					if err != nil {
						b.Fatal(err)
					}
					ownMiB += float64(own) / (1 << 20)
					cl.Close()
					s.Close()
					Free(fd, data)
					b.StartTimer()
				}
				b.ReportMetric(float64(writeNS.Nanoseconds())/float64(b.N), "write-ns/op")
				b.ReportMetric(ownMiB/float64(b.N), "owner-MiB")
			})
		}
	}
}

// BenchmarkWarmCopy: copies into a 1 GiB peer buffer that is mapped and
// whose pages the copies have touched already, with the package's policy
// and with lazy mapping (no span population): what populating a span
// that is populated already costs in the steady state.
func BenchmarkWarmCopy(b *testing.B) {
	const size = 1 << 30
	fd, data, err := Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	defer Free(fd, data)
	s := startServer(b, &owner{fd: fd, data: data, id: 1}, false)
	ctx := context.Background()
	base := registry.AddrOf(data)
	for _, n := range []int{64 << 10, 1536 << 10, 16 << 20} {
		src := make([]byte, n)
		for _, pc := range policies[1:] {
			b.Run(fmt.Sprintf("%dKiB/%s", n>>10, pc.name), func(b *testing.B) {
				opt := policy(b, pc.whole, pc.spanMin)
				cl, err := Dial(ctx, s.Path(), nil, opt)
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				sp, err := cl.Acquire(ctx, base, base, uint64(n))
				if err != nil {
					b.Fatal(err)
				}
				copy(sp.B, src)
				sp.Release()
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					sp, ok := cl.AcquireMapped(base, base, uint64(n))
					if !ok {
						b.Fatal("not mapped")
					}
					copy(sp.B, src)
					sp.Release()
				}
			})
		}
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
