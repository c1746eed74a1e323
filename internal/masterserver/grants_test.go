package masterserver

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// The granter hands a signed grant out again for the same segment, extent
// and mode only while it expires no later than a fresh one would and has
// at least half (READ) or three quarters (WRITE) of the wanted lifetime
// left; the grant verifies for that extent only.
func TestGranterReuse(t *testing.T) {
	keys, err := grant.NewKeyring(map[uint32][]byte{1: []byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	g := newGranter(keys, nil, 30*time.Second)
	v := grant.NewVerifier(keys, nil)
	now := time.Now()
	a := g.sign("n:1", 4096, 4096, grant.Read, now, now.Add(10*time.Second))
	if b := g.sign("n:1", 4096, 4096, grant.Read, now, now.Add(12*time.Second)); !bytes.Equal(a, b) {
		t.Fatal("the same extent and mode, a later wanted expiry: want the grant reused")
	}
	// Expiring later than wanted: a fresh one.
	short := g.sign("n:1", 4096, 4096, grant.Read, now, now.Add(5*time.Second))
	if bytes.Equal(a, short) {
		t.Fatal("a grant expiring after the wanted expiry was reused")
	}
	gs, err := v.Verify(short, "n:1")
	if err != nil {
		t.Fatal(err)
	}
	if !gs.Expires.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("expires %v, want %v", gs.Expires, now.Add(5*time.Second))
	}
	// Less than half of the wanted lifetime left: a fresh one.
	long := g.sign("n:1", 4096, 4096, grant.Read, now, now.Add(time.Minute))
	if bytes.Equal(long, short) || bytes.Equal(long, a) {
		t.Fatal("a grant with under half the wanted lifetime left was reused")
	}
	// Another extent, segment or mode: another grant, covering only its own.
	for _, c := range []struct {
		seg     string
		addr, n uint64
		mode    grant.Mode
	}{{"n:1", 8192, 4096, grant.Read}, {"n:1", 4096, 8192, grant.Read}, {"n:2", 4096, 4096, grant.Read}, {"n:1", 4096, 4096, grant.Write}} {
		b := g.sign(c.seg, c.addr, c.n, c.mode, now, now.Add(time.Minute))
		if bytes.Equal(b, long) {
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
	// WRITE grants (placements) are reused while three quarters of the
	// wanted lifetime are left, never for READ.
	w := g.sign("n:1", 1<<20, 4096, grant.Write, now, now.Add(40*time.Second))
	if w2 := g.sign("n:1", 1<<20, 4096, grant.Write, now, now.Add(50*time.Second)); !bytes.Equal(w, w2) {
		t.Fatal("a WRITE grant with over three quarters of the lifetime left was not reused")
	}
	if w3 := g.sign("n:1", 1<<20, 4096, grant.Write, now, now.Add(time.Minute)); bytes.Equal(w, w3) {
		t.Fatal("a WRITE grant with under three quarters of the lifetime left was reused")
	}
	if r := g.sign("n:1", 1<<20, 4096, grant.Read, now, now.Add(40*time.Second)); bytes.Equal(w, r) {
		t.Fatal("a WRITE grant was handed out for READ")
	}
	if got, err := v.Verify(w, "n:1"); err != nil || got.Mode != grant.Write || got.Covers(grant.Read, 1<<20, 4096) {
		t.Fatalf("WRITE grant %+v, %v", got, err)
	}
	// Tombstones' header grants are always fresh.
	t1 := g.tombs([]*pb.HeaderRef{{Endpoint: "n:1", Addr: 1 << 30}, {Endpoint: "n:1", Addr: 1 << 30}, {Addr: 1 << 31}})
	if bytes.Equal(t1[0].Grant, t1[1].Grant) || t1[2].Grant != nil {
		t.Fatal("a tombstone's header grant was reused, or one without an endpoint signed")
	}
	// Expired entries go when a shard is full, and live ones down to three
	// quarters of the bound if that is not enough.
	const per = maxCachedGrants / grantShards
	for _, exp := range []time.Time{now.Add(-time.Second), now.Add(time.Minute)} {
		sh := g.shard(1<<40, 1)
		sh.cache = map[grantKey]cachedGrant{}
		for i := 0; len(sh.cache) < per; i++ {
			if g.shard(uint64(i), 1) == sh {
				sh.cache[grantKey{"n:1", uint64(i), 1, grant.Read}] = cachedGrant{nil, exp}
			}
		}
		g.sign("n:1", 1<<40, 1, grant.Read, now, now.Add(time.Minute))
		if exp.Before(now) && len(sh.cache) != 1 || !exp.Before(now) && len(sh.cache) != per*3/4+1 {
			t.Fatalf("shard holds %d grants after a sweep (others expiring %v)", len(sh.cache), exp.Sub(now))
		}
		if _, ok := sh.cache[grantKey{"n:1", 1 << 40, 1, grant.Read}]; !ok {
			t.Fatal("the new grant is not kept")
		}
	}
}
