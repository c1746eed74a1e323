package tcp

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// fakeDevice is a Stager whose "device memory" is a slice the lane can
// only reach through the staging calls (its registered address is not
// the slice's), as GPU memory is reached only through driver copies.
type fakeDevice struct {
	reg     *registry.Registry
	mem     []byte
	base    uint64
	commits int
}

const fakeDeviceBase = 0x10000000

func newFakeDevice(t testing.TB, n int) *fakeDevice {
	d := &fakeDevice{reg: registry.New(), mem: make([]byte, n), base: fakeDeviceBase}
	if _, err := d.reg.RegisterDevice(d.base, uint64(n), "cuda:0", 0); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *fakeDevice) Acquire(addr, n uint64) (registry.Span, error) { return d.reg.Acquire(addr, n) }

func (d *fakeDevice) AcquireRead(addr, n uint64) (registry.Span, error) {
	sp, err := d.reg.AcquireAny(addr, n)
	if err != nil {
		return sp, err
	}
	buf := append([]byte(nil), d.mem[addr-d.base:addr-d.base+n]...)
	return sp.Staged(buf, nil), nil
}

func (d *fakeDevice) AcquireWrite(addr, n uint64) (registry.Span, func() error, error) {
	sp, err := d.reg.AcquireAny(addr, n)
	if err != nil {
		return sp, nil, err
	}
	buf := make([]byte, n)
	commit := func() error { d.commits++; copy(d.mem[addr-d.base:], buf); return nil }
	return sp.Staged(buf, nil), commit, nil
}

func laneBytes(hs ...any) []byte {
	var out []byte
	for _, x := range hs {
		switch v := x.(type) {
		case wire.ReqHeader:
			b := make([]byte, wire.ReqHeaderSize)
			v.Put(b)
			out = append(out, b...)
		case []byte:
			out = append(out, v...)
		}
	}
	return out
}

// TestStagedLane: a lane over a Stager reads and writes device memory only
// through staging, commits a WRITE only when it arrived whole and checked,
// and rejects ranges outside the device buffer.
func TestStagedLane(t *testing.T) {
	d := newFakeDevice(t, 4096)
	payload := bytes.Repeat([]byte{7, 8, 9}, 100)
	bad := wire.ReqHeader{Op: wire.OpWrite, ID: 2, Addr: d.base + 1000, Length: 300, Flags: wire.FlagCRC, CRC: wire.CRC32C(payload) + 1}
	in := laneBytes(
		wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: d.base + 100, Length: 300}, payload,
		bad, payload,
		wire.ReqHeader{Op: wire.OpRead, ID: 3, Addr: d.base + 100, Length: 300},
		wire.ReqHeader{Op: wire.OpRead, ID: 4, Addr: d.base + 4000, Length: 200},
	)
	c := &fakeConn{r: bytes.NewReader(in)}
	if err := ServeLane(c, bufio.NewReader(c), d, ServerConfig{MaxSlice: 8192}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.mem[100:400], payload) || d.commits != 1 {
		t.Fatalf("device memory after the writes: commits %d", d.commits)
	}
	if !bytes.Equal(d.mem[1000:1300], make([]byte, 300)) {
		t.Fatal("a write that failed its checksum reached device memory")
	}
	out := c.w.Bytes()
	want := []byte{wire.StatusOK, wire.StatusChecksum, wire.StatusOK, wire.StatusRejected}
	for i, st := range want {
		h, err := wire.DecodeRespHeader(out, 8192)
		if err != nil || h.ID != uint64(i+1) || h.Status != st {
			t.Fatalf("response %d: %+v %v, want status %d", i+1, h, err, st)
		}
		out = out[wire.RespHeaderSize:]
		if h.Status == wire.StatusOK && h.Length > 0 {
			if !bytes.Equal(out[:h.Length], payload) {
				t.Fatal("staged READ sent other bytes")
			}
			out = out[h.Length:]
		}
	}
}

// FuzzServeLaneStaged: arbitrary bytes on a lane over device memory never
// make the server answer with a bad header (and never touch memory but
// through staging: the device's registered address is not mapped).
func FuzzServeLaneStaged(f *testing.F) {
	d := newFakeDevice(f, 4096)
	f.Add(laneBytes(wire.ReqHeader{Op: wire.OpWrite, ID: 1, Addr: fakeDeviceBase, Length: 16}, make([]byte, 16)))
	f.Add(laneBytes(wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: fakeDeviceBase + 4000, Length: 96}))
	f.Add(laneBytes(wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: fakeDeviceBase - 8, Length: 16}))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &fakeConn{r: bytes.NewReader(in)}
		_ = ServeLane(c, bufio.NewReader(c), d, ServerConfig{MaxSlice: 8192})
		checkResponses(t, c.w.Bytes())
	})
}
