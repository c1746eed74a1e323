package tcp

import (
	"bufio"
	"bytes"
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
	f.Add(install, req(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: base, Length: 16}, bytes.Repeat([]byte{1}, 16)))
	f.Add(install, req(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: base + 2040, Length: 16}, bytes.Repeat([]byte{1}, 16)))
	f.Add(install, req(wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: base, Length: 16}, nil))
	f.Add([]byte{}, req(wire.ReqHeader{Op: wire.OpGrant, Length: 20}, bytes.Repeat([]byte{7}, 20)))
	f.Fuzz(func(t *testing.T, pre, in []byte) {
		clear(backing)
		if len(pre) > 0 {
			pre = install // either the valid grant or nothing, then anything
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
