package tcp

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// FuzzServeLaneGrants: a lane that checks grants, fed arbitrary bytes
// after (or instead of) a valid WRITE grant for the first half of the
// registered buffer, never writes outside that half and never returns a
// READ payload (nothing grants a READ).
func FuzzServeLaneGrants(f *testing.F) {
	backing := make([]byte, 3*4096)
	reg := registry.New()
	buf := backing[4096 : 2*4096 : 2*4096]
	if _, err := reg.Register(buf, "", false); err != nil {
		f.Fatal(err)
	}
	base := registry.AddrOf(buf)
	keys, err := grant.NewKeyring(map[uint32][]byte{1: []byte("fuzz-key-0123456789")})
	if err != nil {
		f.Fatal(err)
	}
	v := grant.NewVerifier(keys, func() time.Time { return time.Unix(1000, 0) })
	g, err := keys.Encode(grant.Grant{Segment: "seg", Addr: base, Length: 2048, Mode: grant.Write, Expires: time.Unix(2000, 0)})
	if err != nil {
		f.Fatal(err)
	}
	req := func(h wire.ReqHeader, payload []byte) []byte {
		b := make([]byte, wire.ReqHeaderSize)
		h.Put(b)
		return append(b, payload...)
	}
	install := req(wire.ReqHeader{Op: wire.OpGrant, Length: uint64(len(g))}, g)
	padded := req(wire.ReqHeader{Op: wire.OpGrant, Addr: uint64(len(g)), Length: uint64(len(g) + wire.GrantPad(len(g)))}, append(bytes.Clone(g), make([]byte, wire.GrantPad(len(g)))...))
	f.Add(padded, req(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: base, Length: 16}, bytes.Repeat([]byte{1}, 16)))
	f.Add(install, req(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: base, Length: 16}, bytes.Repeat([]byte{1}, 16)))
	f.Add(install, req(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: base + 2040, Length: 16}, bytes.Repeat([]byte{1}, 16)))
	f.Add(install, req(wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: base, Length: 16}, nil))
	f.Add([]byte{}, req(wire.ReqHeader{Op: wire.OpGrant, Length: 20}, bytes.Repeat([]byte{7}, 20)))
	f.Fuzz(func(t *testing.T, pre, in []byte) {
		clear(backing)
		switch { // the valid grant, padded or not, or nothing, then anything
		case len(pre) > 0 && pre[len(pre)-1] == 0:
			pre = padded
		case len(pre) > 0:
			pre = install
		}
		c := &fakeConn{r: bytes.NewReader(append(bytes.Clone(pre), in...))}
		_ = ServeLane(c, bufio.NewReader(c), reg, ServerConfig{MaxSlice: 8192, Grants: v, Segment: "seg"})
		for i, b := range backing {
			if (i < 4096 || i >= 4096+2048) && b != 0 {
				t.Fatalf("byte %d outside the granted extent was written", i)
			}
		}
		for _, h := range checkResponses(t, c.w.Bytes()) {
			if h.Status == wire.StatusOK && h.Length > 0 {
				t.Fatal("a READ was answered: nothing grants one")
			}
		}
	})
}

// countingConn records how many bytes reads into buffers of bufio's size
// (fills of the lane's reader) returned.
type countingConn struct {
	*fakeConn
	size   int
	filled int
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.fakeConn.Read(b)
	if len(b) >= 1024 && len(b) <= c.size {
		c.filled += n
	}
	return n, err
}

// Between large WRITEs a grant arriving on the lane is read straight from
// the socket with the header behind it, like the header it replaces: the
// next WRITE's payload goes into memory without passing through the
// lane's reader, and lands where it was granted.
func TestServeLaneGrantBetweenLargeWrites(t *testing.T) {
	const size = 256 << 10
	mem := make([]byte, 3*size)
	reg, base, keys, v := laneGrantSetup(t, mem)
	var in []byte
	for i := range 3 {
		g, err := keys.Encode(grant.Grant{Segment: "seg", Addr: base + uint64(i*size), Length: size, Mode: grant.Write, Expires: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		var h [wire.ReqHeaderSize]byte
		if i%2 == 0 { // unpadded
			(&wire.ReqHeader{Op: wire.OpGrant, Length: uint64(len(g))}).Put(h[:])
			in = append(append(in, h[:]...), g...)
		} else { // padded, as lanes send them
			pad := wire.GrantPad(len(g))
			(&wire.ReqHeader{Op: wire.OpGrant, Addr: uint64(len(g)), Length: uint64(len(g) + pad)}).Put(h[:])
			in = append(append(append(in, h[:]...), g...), make([]byte, pad)...)
		}
		(&wire.ReqHeader{Op: wire.OpWrite, ID: uint64(i + 1), Addr: base + uint64(i*size), Length: size}).Put(h[:])
		in = append(append(in, h[:]...), bytes.Repeat([]byte{byte(i + 1)}, size)...)
	}
	const bufSize = 64 << 10
	c := &countingConn{fakeConn: &fakeConn{r: bytes.NewReader(in)}, size: bufSize}
	if err := ServeLane(c, bufio.NewReaderSize(c, bufSize), reg, ServerConfig{MaxSlice: 1 << 20, Grants: v, Segment: "seg"}); err != nil {
		t.Fatal(err)
	}
	hs := checkResponses(t, c.w.Bytes())
	if len(hs) != 3 {
		t.Fatalf("%d responses, want 3", len(hs))
	}
	for i, h := range hs {
		if h.Status != wire.StatusOK {
			t.Fatalf("write %d: status %d", i+1, h.Status)
		}
		if !bytes.Equal(mem[i*size:(i+1)*size], bytes.Repeat([]byte{byte(i + 1)}, size)) {
			t.Fatalf("write %d did not land", i+1)
		}
	}
	// Only the first request went through the reader (nothing before it
	// was large).
	if c.filled > bufSize {
		t.Fatalf("the lane's reader read %d bytes, want at most %d (the first request's)", c.filled, bufSize)
	}
}

// TestLaneSendsGrantOnce: a slice with a grant goes to the grant's home
// lane when that one is idle; a lane sends a grant once while it is among
// the last grant.SetSize grants it sent (the server keeps those),
// whatever string holds its bytes, and again once it is not; every READ
// is served.
func TestLaneSendsGrantOnce(t *testing.T) {
	const n = grant.SetSize + 1
	mem := make([]byte, n*4096)
	reg, base, keys, v := laneGrantSetup(t, mem)
	gs := make([]string, n)
	for i := range gs {
		g, err := keys.Encode(grant.Grant{Segment: "seg", Addr: base + uint64(i*4096), Length: 4096, Mode: grant.Read, Expires: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		gs[i] = string(g)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = ServeLane(c, bufio.NewReader(c), reg, ServerConfig{MaxSlice: 1 << 20, Grants: v, Segment: "seg"})
			})
		}
	})
	dial := func(ctx context.Context, _ int) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}
	dst := make([]byte, 4096)
	read := func(p *Peer, i int) {
		t.Helper()
		c := newCollector()
		// A copy of the grant's bytes: the lane tells grants by their bytes.
		if err := p.Enqueue(&Op{Remote: base + uint64(i*4096), Buf: dst, Done: c, Grant: strings.Clone(gs[i])}); err != nil {
			t.Fatal(err)
		}
		if err := c.wait(t, 1)[0]; err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	// Five lanes: each grant goes to its home lane while that one is idle.
	p, err := DialPeer(t.Context(), PeerConfig{}, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		for i := range grant.SetSize {
			read(p, i)
		}
	}
	if got := v.Stats().Verified; got != grant.SetSize {
		t.Fatalf("%d grants installed, want %d (each sent once)", got, grant.SetSize)
	}
	// One lane (every slice goes to the bulk lane: SmallMax 1) and, in
	// turn, one grant more than the server keeps: each is gone from the
	// lane's last grant.SetSize when it comes again, so it is sent every
	// time (and the server, which no longer has it either, serves it).
	p1, err := DialPeer(t.Context(), PeerConfig{Lanes: 1, SmallMax: 1}, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	for range 3 {
		for i := range n {
			read(p1, i)
		}
	}
	if got, want := v.Stats().Verified, uint64(grant.SetSize+3*n); got != want {
		t.Fatalf("%d grants installed, want %d", got, want)
	}
}

// laneGrantSetup registers mem and returns its registry, its address, a
// keyring and a verifier of its grants.
func laneGrantSetup(t *testing.T, mem []byte) (*registry.Registry, uint64, *grant.Keyring, *grant.Verifier) {
	t.Helper()
	reg := registry.New()
	if _, err := reg.Register(mem, "", false); err != nil {
		t.Fatal(err)
	}
	keys, err := grant.NewKeyring(map[uint32][]byte{1: []byte("lane-key-0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	return reg, registry.AddrOf(mem), keys, grant.NewVerifier(keys, nil)
}
