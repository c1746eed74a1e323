package masterserver

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// The granter signs the same bytes for the same segment, extent and mode
// while the wanted expiry rounds to the same step; a grant never expires
// after the wanted expiry nor before half (READ) or three quarters
// (WRITE) of the wanted lifetime; it verifies for its extent only.
func TestGranterReuse(t *testing.T) {
	keys, err := grant.NewKeyring(map[uint32][]byte{1: []byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	g := newGranter(keys, nil, 30*time.Second)
	now := time.Unix(0, 1<<16*int64(time.Millisecond)*25_000) // on a step of every power of two ms up to 2^16
	v := grant.NewVerifier(keys, func() time.Time { return now })
	at := func(b []byte) grant.Grant {
		t.Helper()
		got, err := v.Verify(b, "n:1")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	a := g.sign("n:1", 4096, 4096, grant.Read, now, now.Add(10*time.Second))
	if got := at(a); !got.Expires.Equal(now.Add(8192 * time.Millisecond)) {
		t.Fatalf("10 s wanted: expires in %v, want 8.192 s (rounded down to 4.096 s steps)", got.Expires.Sub(now))
	}
	// Later calls whose wanted expiry rounds to the same step: the same
	// bytes; to the next step: another grant.
	later := now.Add(time.Second)
	if b := g.sign("n:1", 4096, 4096, grant.Read, later, later.Add(10*time.Second)); !bytes.Equal(a, b) {
		t.Fatal("the same extent, mode and rounded expiry: want the same grant")
	}
	next := now.Add(3 * time.Second)
	if b := g.sign("n:1", 4096, 4096, grant.Read, next, next.Add(10*time.Second)); bytes.Equal(a, b) {
		t.Fatal("a later step got the grant of the earlier one")
	} else if got := at(b); !got.Expires.Equal(now.Add(12288 * time.Millisecond)) {
		t.Fatalf("expires at +%v, want +12.288 s", got.Expires.Sub(now))
	}
	// Within bounds for any lifetime and moment.
	for _, life := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 999 * time.Millisecond, 5 * time.Second, 30 * time.Second} {
		for _, mode := range []grant.Mode{grant.Read, grant.Write} {
			for off := range 50 {
				t0 := now.Add(time.Duration(off) * 7919 * time.Microsecond)
				want := t0.Add(life)
				got := at(g.sign("n:1", 1<<20, 64, mode, t0, want))
				least := life / 2
				if mode == grant.Write {
					least = life * 3 / 4
				}
				if got.Expires.After(want) || got.Expires.Sub(t0) < least || got.Mode != mode {
					t.Fatalf("%v %v at +%v: expires in %v, want %v..%v", mode, life, t0.Sub(now), got.Expires.Sub(t0), least, life)
				}
			}
		}
	}
	// Another extent, segment or mode: another grant, covering only its own.
	base := g.sign("n:1", 4096, 4096, grant.Read, now, now.Add(time.Minute))
	for _, c := range []struct {
		seg     string
		addr, n uint64
		mode    grant.Mode
	}{{"n:1", 8192, 4096, grant.Read}, {"n:1", 4096, 8192, grant.Read}, {"n:2", 4096, 4096, grant.Read}, {"n:1", 4096, 4096, grant.Write}} {
		b := g.sign(c.seg, c.addr, c.n, c.mode, now, now.Add(time.Minute))
		if bytes.Equal(b, base) {
			t.Fatalf("%+v: got the grant of another extent", c)
		}
		if _, err := v.Verify(b, "n:1"); c.seg != "n:1" && !errors.Is(err, grant.ErrWrongSegment) {
			t.Fatalf("%+v: verify on n:1: %v, want ErrWrongSegment", c, err)
		}
		got, err := v.Verify(b, c.seg)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Covers(c.mode, c.addr, c.n) || got.Covers(c.mode, c.addr+c.n, 1) || got.Covers(c.mode, c.addr-1, 1) || (c.mode == grant.Read && got.Covers(grant.Write, c.addr, c.n)) {
			t.Fatalf("%+v: grant %+v covers more or less than its extent", c, got)
		}
	}
	// Another master (its own nonces): other bytes for the same grant.
	if b := newGranter(keys, nil, 30*time.Second).sign("n:1", 4096, 4096, grant.Read, now, now.Add(time.Minute)); bytes.Equal(b, base) {
		t.Fatal("two masters signed the same bytes")
	}
	// Tombstones' header grants are always fresh.
	t1 := g.tombs([]*pb.HeaderRef{{Endpoint: "n:1", Addr: 1 << 30}, {Endpoint: "n:1", Addr: 1 << 30}, {Addr: 1 << 31}})
	if bytes.Equal(t1[0].Grant, t1[1].Grant) || t1[2].Grant != nil {
		t.Fatal("a tombstone's header grant was reused, or one without an endpoint signed")
	}
}

// A task's grants last until its deadline exactly (a task may take most
// of its time), over the header and value of its source (READ) and
// targets (WRITE).
func TestGranterTask(t *testing.T) {
	keys, err := grant.NewKeyring(map[uint32][]byte{1: []byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	g := newGranter(keys, nil, 30*time.Second)
	v := grant.NewVerifier(keys, nil)
	deadline := time.Now().Add(7 * time.Second).Truncate(time.Millisecond)
	a := &pb.TaskAssignment{HeaderLen: 64, DeadlineUnixMs: deadline.UnixMilli(),
		Source: &pb.Replica{Endpoint: "n:1", Addr: 1 << 20, Size: 4096}, Targets: []*pb.Replica{{Endpoint: "n:2", Addr: 2 << 20, Size: 4096}}}
	g.task(a)
	src, err := v.Verify(a.Source.Grant, "n:1")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := v.Verify(a.Targets[0].Grant, "n:2")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		g    grant.Grant
		mode grant.Mode
		addr uint64
	}{{src, grant.Read, 1<<20 - 64}, {dst, grant.Write, 2<<20 - 64}} {
		if d := c.g.Expires.Sub(deadline); d < -time.Millisecond || d > time.Millisecond {
			t.Fatalf("task grant expires %v from the deadline, want at it", d)
		}
		if c.g.Mode != c.mode || !c.g.Covers(c.mode, c.addr, 4096+64) || c.g.Covers(c.mode, c.addr-1, 1) || c.g.Covers(c.mode, c.addr+4096+64, 1) {
			t.Fatalf("task grant %+v: want %v on exactly [%d, +%d)", c.g, c.mode, c.addr, 4096+64)
		}
	}
}
