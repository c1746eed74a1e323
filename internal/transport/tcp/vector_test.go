package tcp

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// vreq encodes a scatter-gather request: header, extent table, and for a
// WRITE a payload of the extents' total length.
func vreq(op byte, id uint64, ext ...wire.Extent) []byte {
	var n uint64
	for _, e := range ext {
		n += e.Length
	}
	b := make([]byte, wire.ReqHeaderSize)
	(&wire.ReqHeader{Op: op, ID: id, Addr: uint64(len(ext)), Length: n}).Put(b)
	b = wire.PutExtents(b, ext)
	if op == wire.OpWriteV {
		b = append(b, bytes.Repeat([]byte{0xCD}, int(min(n, 9000)))...)
	}
	return b
}

// FuzzServeLaneVectored: scatter-gather requests as a lane reads them
// off the network. Whatever arrives, no byte outside the registered buffer
// is written, a request with one extent outside it writes nothing, and the
// output is well-formed responses.
func FuzzServeLaneVectored(f *testing.F) {
	backing := make([]byte, 3*4096)
	reg := registry.New()
	buf := backing[4096 : 2*4096 : 2*4096]
	if _, err := reg.Register(buf, "", false); err != nil {
		f.Fatal(err)
	}
	base := registry.AddrOf(buf)
	f.Add(vreq(wire.OpWriteV, 1, wire.Extent{Addr: base, Length: 16}, wire.Extent{Addr: base + 100, Length: 16}))
	f.Add(vreq(wire.OpReadV, 1, wire.Extent{Addr: base + 4000, Length: 96}, wire.Extent{Addr: base, Length: 8}))
	f.Add(vreq(wire.OpWriteV, 1, wire.Extent{Addr: base, Length: 16}, wire.Extent{Addr: base + 4090, Length: 16}))
	f.Add(append(vreq(wire.OpWriteV, 1, wire.Extent{Addr: base - 8, Length: 16}), vreq(wire.OpReadV, 2, wire.Extent{Addr: base, Length: 4})...))
	f.Add(vreq(wire.OpReadV, 1, wire.Extent{Addr: ^uint64(0) - 4, Length: 4}))
	f.Fuzz(func(t *testing.T, in []byte) {
		clear(backing)
		c := &fakeConn{r: bytes.NewReader(in)}
		_ = ServeLane(c, bufio.NewReader(c), reg, ServerConfig{MaxSlice: 8192})
		for i, b := range backing {
			if (i < 4096 || i >= 2*4096) && b != 0 {
				t.Fatalf("byte %d outside the registered buffer was written", i)
			}
		}
		checkResponses(t, c.w.Bytes())
	})
}

// TestServeLaneVectoredRejectsWhole: a scatter-gather WRITE with one
// extent outside registered memory is answered StatusRejected, writes
// none of its in-bounds extents, and the lane serves the next request.
func TestServeLaneVectoredRejectsWhole(t *testing.T) {
	reg := registry.New()
	buf := make([]byte, 4096)
	if _, err := reg.Register(buf, "", false); err != nil {
		t.Fatal(err)
	}
	base := registry.AddrOf(buf)
	in := vreq(wire.OpWriteV, 1, wire.Extent{Addr: base, Length: 16}, wire.Extent{Addr: base + 4090, Length: 16})
	in = append(in, vreq(wire.OpWriteV, 2, wire.Extent{Addr: base + 32, Length: 8}, wire.Extent{Addr: base + 64, Length: 8})...)
	in = append(in, vreq(wire.OpReadV, 3, wire.Extent{Addr: base + 64, Length: 4}, wire.Extent{Addr: base + 32, Length: 4})...)
	c := &fakeConn{r: bytes.NewReader(in)}
	if err := ServeLane(c, bufio.NewReader(c), reg, ServerConfig{MaxSlice: 8192}); err != nil {
		t.Fatal(err)
	}
	hs := checkResponses(t, c.w.Bytes())
	if len(hs) != 3 || hs[0].Status != wire.StatusRejected || hs[1].Status != wire.StatusOK || hs[2].Status != wire.StatusOK || hs[2].Length != 8 {
		t.Fatalf("responses %+v", hs)
	}
	if buf[0] != 0 || buf[15] != 0 || buf[32] != 0xCD || buf[71] != 0xCD || buf[40] != 0 {
		t.Fatal("memory after a rejected and an accepted scatter-gather write is wrong")
	}
	if out := c.w.Bytes(); !bytes.Equal(out[len(out)-8:], bytes.Repeat([]byte{0xCD}, 8)) {
		t.Fatal("scatter-gather read returned the wrong bytes")
	}
}
