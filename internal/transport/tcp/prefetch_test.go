package tcp

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// prefetchDevice is a fakeDevice that is also a Prefetcher: it records
// every hint and every staged read, in order.
type prefetchDevice struct {
	*fakeDevice
	log []string // "hint A+N" and "read A+N", relative to the device base
}

func (d *prefetchDevice) Prefetch(ranges []wire.Extent) {
	for _, r := range ranges {
		d.log = append(d.log, fmt.Sprintf("hint %d+%d", r.Addr-d.base, r.Length))
	}
}

func (d *prefetchDevice) AcquireRead(addr, n uint64) (registry.Span, error) {
	d.log = append(d.log, fmt.Sprintf("read %d+%d", addr-d.base, n))
	return d.fakeDevice.AcquireRead(addr, n)
}

func extTable(ext ...wire.Extent) []byte { return wire.PutExtents(nil, ext) }

// TestLaneLookahead: before a lane serves a READ it hints that READ and
// the READs buffered behind it (plain and scatter-gather, in order, grant
// ops skipped), up to the first WRITE, whose payload follows; every READ
// is hinted exactly once and before it is read; the READs after the
// WRITE are hinted when the first of them is served.
func TestLaneLookahead(t *testing.T) {
	d := &prefetchDevice{fakeDevice: newFakeDevice(t, 8192)}
	b := d.base
	in := laneBytes(
		wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: b, Length: 100},
		wire.ReqHeader{Op: wire.OpRead, ID: 2, Addr: b + 100, Length: 200},
		wire.ReqHeader{Op: wire.OpReadV, ID: 3, Addr: 2, Length: 300}, extTable(wire.Extent{Addr: b + 1000, Length: 100}, wire.Extent{Addr: b + 2000, Length: 200}),
		wire.ReqHeader{Op: wire.OpGrant, Length: 4}, []byte{1, 2, 3, 4}, // no verifier: ignored
		wire.ReqHeader{Op: wire.OpRead, ID: 4, Addr: b + 3000, Length: 10},
		wire.ReqHeader{Op: wire.OpWrite, ID: 5, Addr: b + 4000, Length: 8}, make([]byte, 8),
		wire.ReqHeader{Op: wire.OpRead, ID: 6, Addr: b + 5000, Length: 20},
		wire.ReqHeader{Op: wire.OpRead, ID: 7, Addr: b + 6000, Length: 30},
	)
	c := &fakeConn{r: bytes.NewReader(in)}
	if err := ServeLane(c, bufio.NewReader(c), d, ServerConfig{MaxSlice: 8192}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"hint 0+100", "hint 100+200", "hint 1000+100", "hint 2000+200", "hint 3000+10",
		"read 0+100", "read 100+200", "read 1000+100", "read 2000+200", "read 3000+10",
		"hint 5000+20", "hint 6000+30",
		"read 5000+20", "read 6000+30",
	}
	if !slices.Equal(d.log, want) {
		t.Fatalf("hints and reads:\n got %q\nwant %q", d.log, want)
	}
	for i, h := range checkResponses(t, c.w.Bytes()) {
		if h.Status != wire.StatusOK {
			t.Fatalf("response %d: %+v", i, h)
		}
	}
}

// TestLaneLookaheadGrants: a lane that checks grants hints only READs a
// grant it already holds covers; one outside it is neither hinted nor
// read, and its denial is counted once (when served, not when looked at).
func TestLaneLookaheadGrants(t *testing.T) {
	d := &prefetchDevice{fakeDevice: newFakeDevice(t, 8192)}
	keys, err := grant.NewKeyring(map[uint32][]byte{1: []byte("lookahead-key-0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	v := grant.NewVerifier(keys, func() time.Time { return now })
	g, err := keys.Encode(grant.Grant{Segment: "seg", Addr: d.base, Length: 4096, Mode: grant.Read, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	in := laneBytes(
		wire.ReqHeader{Op: wire.OpGrant, Length: uint64(len(g))}, g,
		wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: d.base, Length: 100},
		wire.ReqHeader{Op: wire.OpRead, ID: 2, Addr: d.base + 5000, Length: 100},                                                                                             // outside the grant
		wire.ReqHeader{Op: wire.OpReadV, ID: 3, Addr: 2, Length: 200}, extTable(wire.Extent{Addr: d.base + 200, Length: 100}, wire.Extent{Addr: d.base + 4090, Length: 100}), // half outside
		wire.ReqHeader{Op: wire.OpRead, ID: 4, Addr: d.base + 300, Length: 100},
	)
	c := &fakeConn{r: bytes.NewReader(in)}
	if err := ServeLane(c, bufio.NewReader(c), d, ServerConfig{MaxSlice: 8192, Grants: v, Segment: "seg"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"hint 0+100", "hint 300+100", "read 0+100", "read 300+100"}
	if !slices.Equal(d.log, want) {
		t.Fatalf("hints and reads:\n got %q\nwant %q", d.log, want)
	}
	var st []byte
	for _, h := range checkResponses(t, c.w.Bytes()) {
		st = append(st, h.Status)
	}
	if !bytes.Equal(st, []byte{wire.StatusOK, wire.StatusDenied, wire.StatusDenied, wire.StatusOK}) {
		t.Fatalf("statuses %v", st)
	}
	if s := v.Stats(); s.Denied != 2 {
		t.Fatalf("%d denials counted, want 2 (one per denied request)", s.Denied)
	}
}

// TestLaneLookaheadPartial: a request not yet whole in the lane's buffer
// is not hinted with the READ before it; it is hinted when it is served.
func TestLaneLookaheadPartial(t *testing.T) {
	d := &prefetchDevice{fakeDevice: newFakeDevice(t, 8192)}
	first := laneBytes(wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: d.base, Length: 100})
	second := laneBytes(wire.ReqHeader{Op: wire.OpReadV, ID: 2, Addr: 2, Length: 200},
		extTable(wire.Extent{Addr: d.base + 200, Length: 100}, wire.Extent{Addr: d.base + 400, Length: 100}))
	// The reader sees the first request and only part of the second's
	// extent table in its first fill.
	in := append(first, second...)
	cut := len(first) + wire.ReqHeaderSize + 5
	c := &fakeConn{r: bytes.NewReader(in)}
	r := bufio.NewReader(&chunked{c: c, first: cut})
	if err := ServeLane(c, r, d, ServerConfig{MaxSlice: 8192}); err != nil {
		t.Fatal(err)
	}
	want := []string{"hint 0+100", "read 0+100", "hint 200+100", "hint 400+100", "read 200+100", "read 400+100"}
	if !slices.Equal(d.log, want) {
		t.Fatalf("hints and reads:\n got %q\nwant %q", d.log, want)
	}
}

// chunked reads at most first bytes in its first Read, then the rest.
type chunked struct {
	c     *fakeConn
	first int
	done  bool
}

func (c *chunked) Read(b []byte) (int, error) {
	if !c.done {
		c.done = true
		return c.c.Read(b[:min(len(b), c.first)])
	}
	return c.c.Read(b)
}

// FuzzLaneLookahead: whatever bytes follow a READ in the lane's buffer,
// the lookahead hints only ranges of whole, decodable READs and never
// stops the lane from answering what it answers without one.
func FuzzLaneLookahead(f *testing.F) {
	f.Add(laneBytes(wire.ReqHeader{Op: wire.OpRead, ID: 2, Addr: fakeDeviceBase + 10, Length: 10}))
	f.Add(laneBytes(wire.ReqHeader{Op: wire.OpReadV, ID: 2, Addr: 1, Length: 10}, extTable(wire.Extent{Addr: fakeDeviceBase, Length: 10})))
	f.Add(laneBytes(wire.ReqHeader{Op: wire.OpReadV, ID: 2, Addr: 3, Length: 10}, []byte{1, 2, 3}))
	f.Add(laneBytes(wire.ReqHeader{Op: wire.OpGrant, Length: 3}, []byte{1}))
	f.Fuzz(func(t *testing.T, tail []byte) {
		in := append(laneBytes(wire.ReqHeader{Op: wire.OpRead, ID: 1, Addr: fakeDeviceBase, Length: 16}), tail...)
		with := &prefetchDevice{fakeDevice: newFakeDevice(t, 4096)}
		c1 := &fakeConn{r: bytes.NewReader(in)}
		err1 := ServeLane(c1, bufio.NewReader(c1), with, ServerConfig{MaxSlice: 8192})
		without := newFakeDevice(t, 4096)
		c2 := &fakeConn{r: bytes.NewReader(in)}
		err2 := ServeLane(c2, bufio.NewReader(c2), without, ServerConfig{MaxSlice: 8192})
		if (err1 == nil) != (err2 == nil) || !bytes.Equal(c1.w.Bytes(), c2.w.Bytes()) {
			t.Fatalf("the lookahead changed the lane's answers: %v / %v", err1, err2)
		}
		for _, l := range with.log {
			var op string
			var a, n uint64
			if _, err := fmt.Sscanf(l, "%s %d+%d", &op, &a, &n); err != nil || (op == "hint" && (n == 0 || n > 8192)) {
				t.Fatalf("bad hint %q", l)
			}
		}
	})
}
