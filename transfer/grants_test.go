package transfer

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/wire"
)

func TestGrantFitsAFrame(t *testing.T) {
	if grant.MaxEncoded > wire.MaxGrant {
		t.Fatalf("a grant may be %d bytes, a lane takes %d", grant.MaxEncoded, wire.MaxGrant)
	}
}

func testKeys(t testing.TB, key string) *grant.Keyring {
	t.Helper()
	k, err := grant.NewKeyring(map[uint32][]byte{1: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestGrantsAdversarial: an initiator holding the engines' secret tries
// every way around the target's grant checks. Each attempt fails with
// ErrDenied, the target's memory reads back unchanged, nothing leaks into
// the initiator's buffer, and the target keeps serving valid grants.
func TestGrantsAdversarial(t *testing.T) {
	keys := testKeys(t, "storage-pool-key-0123456789")
	v := grant.NewVerifier(keys, nil)
	const secret = "engine-secret"
	tgt := openEngine(t, Config{Transport: TransportAuto, Secret: secret, Grants: v})
	ini := openEngine(t, Config{Transport: TransportAuto, Secret: secret})
	seg, err := ini.OpenSegment(ctxT(t), tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	mem, err := tgt.AllocateManaged(size) // shareable, were grants off
	if err != nil {
		t.Fatal(err)
	}
	fill(mem, 1)
	orig := bytes.Clone(mem)
	base := uint64(AddrOf(mem))
	// Object A = [4K, 68K) is the initiator's; B = [68K, 132K) another's;
	// [512K, 1M) is free space.
	const objA, objB, free = 4 << 10, 68 << 10, 512 << 10
	const objLen = 64 << 10
	local := make([]byte, 2*objLen)
	mint := func(k *grant.Keyring, g grant.Grant) []byte {
		t.Helper()
		if g.Segment == "" {
			g.Segment = tgt.Name()
		}
		if g.Expires.IsZero() {
			g.Expires = time.Now().Add(time.Minute)
		}
		b, err := k.Encode(g)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	readA := mint(keys, grant.Grant{Addr: base + objA, Length: objLen, Mode: grant.Read})
	writeA := mint(keys, grant.Grant{Addr: base + objA, Length: objLen, Mode: grant.Write})
	forged := bytes.Clone(readA)
	forged[len(forged)-1] ^= 0x55
	widened := bytes.Clone(readA)
	widened[18] ^= 0x08 // length 64K -> 64K + 512K: the MAC breaks
	expired := mint(keys, grant.Grant{Addr: base + objA, Length: objLen, Mode: grant.Read, Expires: time.Now().Add(-time.Second)})
	otherKey := mint(testKeys(t, "an-attacker-made-this-key"), grant.Grant{Addr: base + objB, Length: objLen, Mode: grant.Read})
	otherSeg := mint(keys, grant.Grant{Segment: "10.0.0.9:1", Addr: base + objB, Length: objLen, Mode: grant.Read})
	oneShot, os, err := v.MintOneShot(grant.Grant{Segment: tgt.Name(), Addr: base + objB, Length: objLen, Mode: grant.Write, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	v.Release(os.Nonce) // its request ended: replays must fail

	// Each attempt comes from a fresh initiator (fresh lanes), so no grant
	// a previous attempt installed is on its connections.
	run := func(op Opcode, remote uint64, n int, g []byte) error {
		t.Helper()
		ini := openEngine(t, Config{Transport: TransportAuto, Secret: secret})
		seg, err := ini.OpenSegment(ctxT(t), tgt.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := ini.RegisterBytes(local, ""); err != nil {
			t.Fatal(err)
		}
		clear(local)
		if op == OpWrite {
			fill(local, 99)
		}
		err = ini.Transfer(ctxT(t), []Request{{Op: op, Local: AddrOf(local), Segment: seg, Remote: remote, Length: n, Grant: string(g)}})
		_ = ini.Close()
		return err
	}
	for _, tc := range []struct {
		name   string
		op     Opcode
		remote uint64
		n      int
		grant  []byte
	}{
		{"read without grant", OpRead, base + objA, objLen, nil},
		{"write without grant", OpWrite, base + objA, objLen, nil},
		{"read another object", OpRead, base + objB, objLen, readA},
		{"read free space", OpRead, base + free, objLen, readA},
		{"write free space", OpWrite, base + free, objLen, writeA},
		{"read into the neighbour", OpRead, base + objA, objLen + 1, readA},
		{"read before the extent", OpRead, base + objA - 1, objLen, readA},
		{"write with a read grant", OpWrite, base + objA, objLen, readA},
		{"read with a write grant", OpRead, base + objA, objLen, writeA},
		{"forged", OpRead, base + objA, objLen, forged},
		{"widened", OpRead, base + objA, 2 * objLen, widened},
		{"expired", OpRead, base + objA, objLen, expired},
		{"other key", OpRead, base + objB, objLen, otherKey},
		{"other segment", OpRead, base + objB, objLen, otherSeg},
		{"replayed one-shot", OpWrite, base + objB, objLen, oneShot},
		{"garbage", OpRead, base + objB, objLen, []byte("not a grant at all")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.op, tc.remote, tc.n, tc.grant)
			if !errors.Is(err, ErrDenied) {
				t.Fatalf("err = %v, want ErrDenied", err)
			}
			if !bytes.Equal(mem, orig) {
				t.Fatal("target memory changed")
			}
			if tc.op == OpRead && bytes.Count(local, []byte{0}) != len(local) {
				t.Fatal("bytes leaked into the initiator's buffer")
			}
		})
	}
	if st := tgt.GrantStats(); st.Denied < 16 || st.Refused < 6 {
		t.Fatalf("grant stats %+v", st)
	}
	// Still serving: the valid grants work, over TCP (no shared memory).
	if err := ini.RegisterBytes(local, ""); err != nil {
		t.Fatal(err)
	}
	b, err := ini.Submit(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(local), Segment: seg, Remote: base + objA, Length: objLen, Grant: string(readA)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if tr := b.Transport(0); tr != TransportTCP {
		t.Fatalf("served over %s, want tcp", tr)
	}
	b.Free()
	if !bytes.Equal(local[:objLen], orig[objA:objA+objLen]) {
		t.Fatal("granted read returned wrong bytes")
	}
	fill(local, 5)
	if err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: base + objA, Length: objLen, Grant: string(writeA)}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[objA:objA+objLen], local[:objLen]) || !bytes.Equal(mem[:objA], orig[:objA]) || !bytes.Equal(mem[objA+objLen:], orig[objA+objLen:]) {
		t.Fatal("granted write landed wrong")
	}
	d, err := ini.Segment(ctxT(t), tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, bd := range d.Buffers {
		if bd.Shareable {
			t.Fatal("an engine with grants advertises a shareable buffer")
		}
	}
}

// TestGrantsLargeTransfer: one grant covers a transfer cut into many
// slices over several lanes; grants off, the same transfer needs none.
func TestGrantsLargeTransfer(t *testing.T) {
	keys := testKeys(t, "storage-pool-key-0123456789")
	for _, on := range []bool{false, true} {
		cfg := Config{Transport: TransportTCP}
		if on {
			cfg.Grants = grant.NewVerifier(keys, nil)
		}
		tgt := openEngine(t, cfg)
		ini := openEngine(t, Config{Transport: TransportTCP})
		seg, err := ini.OpenSegment(ctxT(t), tgt.Name())
		if err != nil {
			t.Fatal(err)
		}
		const size = 5<<20 + 7
		remote, local, back := make([]byte, size), make([]byte, size), make([]byte, size)
		_ = tgt.RegisterBytes(remote, "")
		_ = ini.RegisterBytes(local, "")
		_ = ini.RegisterBytes(back, "")
		fill(local, 3)
		var g string
		if on {
			b, _ := keys.Encode(grant.Grant{Segment: tgt.Name(), Addr: uint64(AddrOf(remote)), Length: size, Mode: grant.Read | grant.Write, Expires: time.Now().Add(time.Minute)})
			g = string(b)
		}
		if err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: size, Grant: g}}); err != nil {
			t.Fatal(err)
		}
		if err := ini.Transfer(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(back), Segment: seg, Remote: uint64(AddrOf(remote)), Length: size, Grant: g}}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, local) {
			t.Fatalf("grants %v: data differs", on)
		}
	}
}
