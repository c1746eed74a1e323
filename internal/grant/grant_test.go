package grant

import (
	"errors"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func ring(t testing.TB, id uint32, key string) *Keyring {
	t.Helper()
	k, err := NewKeyring(map[uint32][]byte{id: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestVerify(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	keys := ring(t, 1, "0123456789abcdef0123")
	other := ring(t, 1, "another-key-of-16-bytes")
	v := NewVerifier(keys, c.now)
	base := Grant{Segment: "n:1", Addr: 4096, Length: 8192, Mode: Read, Expires: c.t.Add(time.Second), Tenant: "t", Lease: 7}
	good, err := keys.Encode(base)
	if err != nil {
		t.Fatal(err)
	}
	forgedMAC := append([]byte(nil), good...)
	forgedMAC[len(forgedMAC)-1] ^= 1
	widened := append([]byte(nil), good...)
	widened[22]++ // length low byte: the MAC no longer matches
	wrongKey, _ := other.Encode(base)
	expired := base
	expired.Expires = c.t
	exp, _ := keys.Encode(expired)
	seg := base
	seg.Segment = "n:2"
	otherSeg, _ := keys.Encode(seg)
	unknown := ring(t, 9, "0123456789abcdef0123")
	unk, _ := unknown.Encode(base)
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"good", good, nil},
		{"forged mac", forgedMAC, ErrBadMAC},
		{"widened", widened, ErrBadMAC},
		{"other key", wrongKey, ErrBadMAC},
		{"expired", exp, ErrExpired},
		{"other segment", otherSeg, ErrWrongSegment},
		{"unknown key id", unk, ErrUnknownKey},
		{"truncated", good[:20], ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := v.Verify(tc.b, "n:1")
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err == nil && (g.Addr != 4096 || g.Length != 8192 || g.Tenant != "t" || g.Lease != 7 || g.Mode != Read) {
				t.Fatalf("decoded %+v", g)
			}
		})
	}
	if st := v.Stats(); st.Verified != 1 || st.Refused != 7 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRotation(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	old := ring(t, 1, "old-key-0123456789")
	both, err := NewKeyring(map[uint32][]byte{1: []byte("old-key-0123456789"), 2: []byte("new-key-0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	g := Grant{Segment: "s", Addr: 1, Length: 1, Mode: Write, Expires: c.t.Add(time.Minute)}
	b1, _ := old.Encode(g)
	b2, _ := both.Encode(g)
	v := NewVerifier(both, c.now)
	for _, b := range [][]byte{b1, b2} {
		if _, err := v.Verify(b, "s"); err != nil {
			t.Fatal(err)
		}
	}
	if got, _, _ := Decode(b2); got.KeyID != 2 {
		t.Fatalf("new grants signed with key %d, want 2", got.KeyID)
	}
	if _, err := NewVerifier(old, c.now).Verify(b2, "s"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old-only verifier: %v", err)
	}
}

func TestParseKeys(t *testing.T) {
	k, err := ParseKeys([]byte("# keys\n1:" + NewKeyHex() + "\n\n3:" + NewKeyHex() + "\n"))
	if err != nil || k.current != 3 || len(k.keys) != 2 {
		t.Fatalf("%v %+v", err, k)
	}
	for _, bad := range []string{"", "1" + NewKeyHex(), "x:00", "1:zz", "1:0011", "1:" + NewKeyHex() + "\n1:" + NewKeyHex()} {
		if _, err := ParseKeys([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestSetAllow(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	keys := ring(t, 1, "0123456789abcdef0123")
	v := NewVerifier(keys, c.now)
	s := v.NewSet("seg")
	w, _ := keys.Encode(Grant{Segment: "seg", Addr: 100, Length: 100, Mode: Write, Expires: c.t.Add(time.Second)})
	if err := s.Install(w); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode    Mode
		addr, n uint64
		ok      bool
	}{
		{Write, 100, 100, true}, {Write, 150, 10, true}, {Read, 100, 10, false},
		{Write, 99, 2, false}, {Write, 199, 2, false}, {Write, 200, 1, false}, {Write, 100, 0, false},
		{Write, ^uint64(0) - 1, 4, false},
	} {
		if err := s.Allow(tc.mode, tc.addr, tc.n); (err == nil) != tc.ok {
			t.Errorf("Allow(%d, %d, %d) = %v", tc.mode, tc.addr, tc.n, err)
		}
	}
	c.t = c.t.Add(time.Second)
	if err := s.Allow(Write, 100, 1); !errors.Is(err, ErrDenied) {
		t.Fatalf("after expiry: %v", err)
	}
}

func TestOneShot(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	v := NewVerifier(ring(t, 1, "0123456789abcdef0123"), c.now)
	b, g, err := v.MintOneShot(Grant{Segment: "d", Addr: 0x1000, Length: 64, Mode: Write, Expires: c.t.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	s := v.NewSet("d")
	if err := s.Install(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Allow(Write, 0x1000, 64); err != nil {
		t.Fatal(err)
	}
	v.Release(g.Nonce)
	if err := s.Allow(Write, 0x1000, 64); !errors.Is(err, ErrDenied) {
		t.Fatalf("cached after release: %v", err)
	}
	if err := v.NewSet("d").Install(b); !errors.Is(err, ErrRevoked) {
		t.Fatalf("replayed: %v", err)
	}
}

func TestSetBounded(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	keys := ring(t, 1, "0123456789abcdef0123")
	v := NewVerifier(keys, c.now)
	s := v.NewSet("s")
	for i := range 3 * SetSize {
		b, _ := keys.Encode(Grant{Segment: "s", Addr: uint64(i) * 10, Length: 10, Mode: Read, Expires: c.t.Add(time.Second)})
		if err := s.Install(b); err != nil {
			t.Fatal(err)
		}
	}
	if s.n != SetSize {
		t.Fatalf("%d grants kept", s.n)
	}
	if s.Allow(Read, uint64(3*SetSize-1)*10, 10) != nil || s.Allow(Read, 0, 10) == nil {
		t.Fatal("set keeps the wrong grants")
	}
}

func FuzzDecode(f *testing.F) {
	keys := ring(f, 1, "0123456789abcdef0123")
	g, _ := keys.Encode(Grant{Segment: "127.0.0.1:1234", Addr: 1 << 40, Length: 4096, Mode: Read | Write, Expires: time.Unix(2000, 0), Tenant: "acme", Lease: 3})
	f.Add(g)
	gx, _ := keys.Encode(Grant{Segment: "d:1", Addr: 64, Length: 64, Extents: []Extent{{256, 64}, {1024, 4096}}, Mode: Write, Flags: FlagOneShot, Expires: time.Unix(2000, 0)})
	f.Add(gx)
	f.Add([]byte{})
	f.Add(g[:len(g)-1])
	v := NewVerifier(keys, func() time.Time { return time.Unix(1000, 0) })
	// Only what the keyring signed installs (g, verified once before).
	if err := v.NewSet("127.0.0.1:1234").Install(g); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := v.NewSet("127.0.0.1:1234").Install(b); err == nil {
			if d, _, err := Decode(b); err != nil || string(keys.sign(d)) != string(b) {
				t.Fatal("a lane took a grant we did not sign")
			}
		}
		d, n, err := Decode(b)
		if err != nil {
			if _, verr := v.Verify(b, ""); verr == nil {
				t.Fatal("verified what does not decode")
			}
			return
		}
		if n+macLen != len(b) || d.Length == 0 || d.Addr+d.Length < d.Addr || checkExtents(d) != nil {
			t.Fatalf("decoded %+v n=%d len=%d", d, n, len(b))
		}
		// Re-signing the decoded fields gives the same signed bytes.
		if re := keys.sign(d); len(re) < n || string(re[:n]) != string(b[:n]) {
			t.Fatalf("re-encoding differs")
		}
		if vg, err := v.Verify(b, ""); err == nil {
			// Only a grant that really carries our MAC verifies.
			if s := keys.sign(vg); string(s) != string(b) {
				t.Fatal("verified a grant we did not sign")
			}
		}
	})
}

func TestExtents(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	keys := ring(t, 1, "0123456789abcdef0123")
	v := NewVerifier(keys, c.now)
	xs := ExtentsOf([]Extent{{500, 100}, {100, 50}, {150, 10}, {0, 0}, {900, 10}, {550, 100}})
	want := []Extent{{100, 60}, {500, 150}, {900, 10}}
	if len(xs) != len(want) {
		t.Fatalf("ExtentsOf = %v", xs)
	}
	for i := range want {
		if xs[i] != want[i] {
			t.Fatalf("ExtentsOf = %v", xs)
		}
	}
	b, err := keys.Encode(Grant{Segment: "d", Addr: xs[0].Addr, Length: xs[0].Length, Extents: xs[1:], Mode: Write, Expires: c.t.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	s := v.NewSet("d")
	if err := s.Install(b); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr, n uint64
		ok      bool
	}{
		{100, 60, true}, {120, 10, true}, {500, 150, true}, {600, 50, true}, {900, 10, true},
		{99, 2, false}, {155, 10, false}, {160, 1, false}, {499, 1, false}, {640, 11, false}, {905, 10, false}, {0, 1, false},
		{1 << 40, 1, false},
	} {
		if err := s.Allow(Write, tc.addr, tc.n); (err == nil) != tc.ok {
			t.Errorf("Allow(%d, %d) = %v", tc.addr, tc.n, err)
		}
	}
	if _, err := keys.Encode(Grant{Segment: "d", Addr: 1, Length: 1, Extents: []Extent{{10, 5}, {12, 5}}, Mode: Write}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("overlapping extents encoded: %v", err)
	}
}

// TestMountProof: a proof of mount verifies for its client, engine and
// range only, and not with another key, nor once expired.
func TestMountProof(t *testing.T) {
	keys, err := ParseKeys([]byte("1:" + NewKeyHex()))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	clock := now
	v := NewVerifier(keys, func() time.Time { return clock })
	p, err := keys.MountProof("node-1", "10.0.0.1:7000", 1<<30, 1<<20, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.CheckMount(p, "node-1", "10.0.0.1:7000", 1<<30, 1<<20); err != nil {
		t.Fatal(err)
	}
	other, _ := ParseKeys([]byte("1:" + NewKeyHex()))
	forged, _ := other.MountProof("node-1", "10.0.0.1:7000", 1<<30, 1<<20, now)
	for name, err := range map[string]error{
		"no proof":     v.CheckMount(nil, "node-1", "10.0.0.1:7000", 1<<30, 1<<20),
		"other client": v.CheckMount(p, "node-2", "10.0.0.1:7000", 1<<30, 1<<20),
		"other engine": v.CheckMount(p, "node-1", "10.0.0.2:7000", 1<<30, 1<<20),
		"other base":   v.CheckMount(p, "node-1", "10.0.0.1:7000", 1<<31, 1<<20),
		"larger":       v.CheckMount(p, "node-1", "10.0.0.1:7000", 1<<30, 1<<21),
		"other key":    v.CheckMount(forged, "node-1", "10.0.0.1:7000", 1<<30, 1<<20),
		"garbage":      v.CheckMount([]byte("garbage"), "node-1", "10.0.0.1:7000", 1<<30, 1<<20),
	} {
		if !errors.Is(err, ErrMountProof) {
			t.Errorf("%s: %v, want ErrMountProof", name, err)
		}
	}
	clock = now.Add(MountProofTTL)
	if err := v.CheckMount(p, "node-1", "10.0.0.1:7000", 1<<30, 1<<20); !errors.Is(err, ErrMountProof) {
		t.Fatalf("expired: %v", err)
	}
}
