package grant

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A grant sent again (on a lane or another of the same verifier) is
// verified again and takes a slot of the lane's ring each time; a copy with its fields changed
// but the MAC kept fails, expiry still holds, and a grant for one extent
// never covers another.
func TestSetResentGrant(t *testing.T) {
	for _, mode := range []Mode{Read, Write} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) { testSetResentGrant(t, mode) })
	}
}

func testSetResentGrant(t *testing.T, mode Mode) {
	c := &clock{t: time.Unix(1000, 0)}
	keys := ring(t, 1, "0123456789abcdef0123")
	v := NewVerifier(keys, c.now)
	s := v.NewSet("n:1")
	otherMode := (Read | Write) ^ mode
	g := Grant{Segment: "n:1", Addr: 4096, Length: 4096, Mode: mode, Expires: c.t.Add(time.Second)}
	b, err := keys.Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := s.Install(b); err != nil {
			t.Fatal(err)
		}
	}
	if st := v.Stats(); st.Verified != 3 || st.Refused != 0 {
		t.Fatalf("stats %+v", st)
	}
	if n := kept(s); n != 3 {
		t.Fatalf("the set keeps %d grants, want 3 (the same grant three times, not looked for)", n)
	}
	if err := s.Allow(mode, 4096, 4096); err != nil {
		t.Fatalf("granted extent: %v", err)
	}
	// Another extent, a wider one and the other mode are refused.
	for _, x := range []struct {
		m       Mode
		addr, n uint64
	}{{mode, 8192, 4096}, {mode, 4096, 4097}, {mode, 0, 4096}, {otherMode, 4096, 4096}} {
		if err := s.Allow(x.m, x.addr, x.n); !errors.Is(err, ErrDenied) {
			t.Fatalf("mode %d %d+%d: err = %v, want ErrDenied", x.m, x.addr, x.n, err)
		}
	}
	// A widened copy keeping the MAC, on this lane and another: not the
	// bytes verified before, so verified, and refused.
	wide := append([]byte(nil), b...)
	wide[22] = 0xff // length low byte
	rw := append([]byte(nil), b...)
	rw[1] = byte(Read | Write)
	for _, set := range []*Set{s, v.NewSet("n:1")} {
		for _, x := range [][]byte{wide, rw} {
			if err := set.Install(x); !errors.Is(err, ErrBadMAC) {
				t.Fatalf("altered copy: err = %v, want ErrBadMAC", err)
			}
		}
		if err := set.Allow(mode, 4096, 4096+0xff); !errors.Is(err, ErrDenied) {
			t.Fatalf("widened copy: err = %v, want ErrDenied", err)
		}
		if err := set.Allow(otherMode, 4096, 4096); !errors.Is(err, ErrDenied) {
			t.Fatalf("copy with the mode widened: err = %v, want ErrDenied", err)
		}
	}
	// The grant itself on another lane: verified, and allowed.
	s3 := v.NewSet("n:1")
	verified := v.Stats().Verified
	if err := s3.Install(b); err != nil {
		t.Fatal(err)
	}
	if err := s3.Allow(mode, 4096, 4096); err != nil {
		t.Fatalf("granted extent on another lane: %v", err)
	}
	if st := v.Stats(); st.Verified != verified+1 {
		t.Fatalf("verified %d, want %d", st.Verified, verified+1)
	}
	// Expired: sending it again does not revive it, on this lane or a new one.
	c.t = c.t.Add(time.Second)
	if err := s.Install(b); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired grant sent again: err = %v, want ErrExpired", err)
	}
	if err := s.Allow(mode, 4096, 4096); !errors.Is(err, ErrDenied) {
		t.Fatalf("expired grant sent again: err = %v, want ErrDenied", err)
	}
	if err := v.NewSet("n:1").Install(b); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired grant on a new lane: err = %v, want ErrExpired", err)
	}
	// A grant for another segment is refused even when a copy of a kept
	// grant's MAC is attached.
	other, err := keys.Encode(Grant{Segment: "n:2", Addr: 4096, Length: 4096, Mode: mode, Expires: c.t.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	s2 := v.NewSet("n:1")
	if err := s2.Install(other); !errors.Is(err, ErrWrongSegment) {
		t.Fatalf("other segment: err = %v, want ErrWrongSegment", err)
	}
	if err := s2.Allow(mode, 4096, 4096); !errors.Is(err, ErrDenied) {
		t.Fatalf("other segment's grant: err = %v, want ErrDenied", err)
	}
}

func kept(s *Set) (n int) {
	for i := range s.n {
		if s.ring[i].Mode != 0 {
			n++
		}
	}
	return n
}

// Verifying a grant allocates nothing.
func TestVerifyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	keys := ring(t, 1, "0123456789abcdef0123")
	v := NewVerifier(keys, nil)
	b, err := keys.Encode(Grant{Segment: "n:1", Addr: 1, Length: 1, Mode: Read, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := v.Verify(b, "n:1"); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Verify: %v allocations, want 0", n)
	}
}

// A grant verified on one lane must still name the segment of another it
// comes to; a released one-shot grant is refused even when verified
// before, on a new lane and on its own.
func TestSetSegmentAndRelease(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	keys := ring(t, 1, "0123456789abcdef0123")
	v := NewVerifier(keys, c.now)
	b, err := keys.Encode(Grant{Segment: "n:1", Addr: 0, Length: 64, Mode: Read, Expires: c.t.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.NewSet("n:1").Install(b); err != nil {
		t.Fatal(err)
	}
	if err := v.NewSet("n:2").Install(b); !errors.Is(err, ErrWrongSegment) {
		t.Fatalf("other segment: err = %v, want ErrWrongSegment", err)
	}
	one, _, err := v.MintOneShot(Grant{Segment: "n:1", Addr: 0, Length: 64, Mode: Write, Expires: c.t.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	g, _, _ := Decode(one)
	s := v.NewSet("n:1")
	if err := s.Install(one); err != nil {
		t.Fatal(err)
	}
	v.Release(g.Nonce)
	if err := v.NewSet("n:1").Install(one); !errors.Is(err, ErrRevoked) {
		t.Fatalf("released one-shot: err = %v, want ErrRevoked", err)
	}
	if err := s.Allow(Write, 0, 64); !errors.Is(err, ErrDenied) {
		t.Fatalf("released one-shot on its lane: err = %v, want ErrDenied", err)
	}
}

// A lane verifies with its own MAC state, of the key its last grant
// named: grants of the old and the new key in turn (a rotation) all
// verify, one of an unknown key is refused, and a forged one of either
// key fails its MAC, whichever key the state was of.
func TestSetKeysInTurn(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	both, err := NewKeyring(map[uint32][]byte{1: []byte("old-key-of-16-bytes!"), 2: []byte("new-key-of-16-bytes!")})
	if err != nil {
		t.Fatal(err)
	}
	old := ring(t, 1, "old-key-of-16-bytes!")
	stranger := ring(t, 3, "other-key-16-bytes!!")
	v := NewVerifier(both, c.now)
	s := v.NewSet("n:1")
	for i := range 6 {
		signer := both // signs with key 2
		if i%2 == 0 {
			signer = old
		}
		g, err := signer.Encode(Grant{Segment: "n:1", Addr: uint64(i) << 12, Length: 4096, Mode: Write, Expires: c.t.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Install(g); err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		if err := s.Allow(Write, uint64(i)<<12, 4096); err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		forged := append([]byte(nil), g...)
		forged[len(forged)-1] ^= 1
		if err := s.Install(forged); !errors.Is(err, ErrBadMAC) {
			t.Fatalf("forged grant %d: err = %v, want ErrBadMAC", i, err)
		}
	}
	g, err := stranger.Encode(Grant{Segment: "n:1", Addr: 1 << 30, Length: 4096, Mode: Read, Expires: c.t.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Install(g); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown key: err = %v, want ErrUnknownKey", err)
	}
	if err := s.Allow(Read, 1<<30, 4096); !errors.Is(err, ErrDenied) {
		t.Fatalf("unknown key's extent: err = %v, want ErrDenied", err)
	}
	if st := v.Stats(); st.Verified != 6 || st.Refused != 7 {
		t.Fatalf("stats %+v, want 6 verified, 7 refused", st)
	}
}
