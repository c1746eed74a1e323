package transfer

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// vecEnvs are the scatter-gather environments: every transport, TCP to a
// peer treated as one whose lanes serve no scatter-gather requests (the
// plain fallback), and TCP with a CRC32C per slice.
func vecEnvs(t *testing.T) map[string]*suiteEnv {
	t.Helper()
	envs := map[string]*suiteEnv{}
	for _, tr := range suiteTransports {
		envs[tr] = newSuiteEnv(t, tr)
	}
	old := &suiteEnv{want: TransportTCP}
	old.tgt = openEngine(t, Config{Transport: TransportTCP})
	old.ini = openEngine(t, Config{Transport: TransportTCP, noVectored: true})
	var err error
	if old.remote, err = old.tgt.AllocateManaged(suiteBuf); err != nil {
		t.Fatal(err)
	}
	old.local = make([]byte, suiteBuf)
	if err := old.ini.RegisterBytes(old.local, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	if old.seg, err = old.ini.OpenSegment(ctxT(t), old.tgt.Name()); err != nil {
		t.Fatal(err)
	}
	envs["tcp-plain"] = old
	crc := &suiteEnv{want: TransportTCP}
	crc.tgt = openEngine(t, Config{Transport: TransportTCP, Checksum: true})
	crc.ini = openEngine(t, Config{Transport: TransportTCP, Checksum: true})
	if crc.remote, err = crc.tgt.AllocateManaged(suiteBuf); err != nil {
		t.Fatal(err)
	}
	crc.local = make([]byte, suiteBuf)
	if err := crc.ini.RegisterBytes(crc.local, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	if crc.seg, err = crc.ini.OpenSegment(ctxT(t), crc.tgt.Name()); err != nil {
		t.Fatal(err)
	}
	envs["tcp-checksum"] = crc
	return envs
}

// TestScatterGather moves strided, adjacent and mixed extents (the shapes
// of a TP-mismatched KV transfer: adjacent on one side, strided on the
// other) as one request each, writes then reads them back, on every
// transport; every byte lands where its extent says and no other byte
// of the target changes.
func TestScatterGather(t *testing.T) {
	const piece = 2 << 10
	shapes := []struct {
		name                string
		n, lstride, rstride int
	}{
		{"gather local", 300, 3 * piece, piece},      // local strided, remote adjacent (1 -> 2 TP)
		{"scatter remote", 300, piece, 2 * piece},    // local adjacent, remote strided (2 -> 1 TP)
		{"both strided", 200, 2 * piece, 4 * piece},  // neither adjacent
		{"both adjacent", 500, piece, piece},         // merged into one range
		{"crossing slices", 3, 300 << 10, 400 << 10}, // extents larger than a TCP slice
	}
	for name, env := range vecEnvs(t) {
		for _, sh := range shapes {
			t.Run(name+"/"+sh.name, func(t *testing.T) {
				size := piece
				if sh.lstride > 100<<10 {
					size = 256<<10 + 17
				}
				for i := range env.local {
					env.local[i] = byte(i*7 + 3)
				}
				clear(env.remote)
				var ext []Extent
				for i := 0; i < sh.n; i++ {
					ext = append(ext, Extent{Local: AddrOf(env.local) + uintptr(i*sh.lstride), Remote: uint64(AddrOf(env.remote)) + uint64(i*sh.rstride), Length: size})
				}
				trs, err := env.run(t, Request{Op: OpWrite, Segment: env.seg, Extents: ext})
				if err != nil || trs[0] != env.want {
					t.Fatalf("write: %v via %v, want %s", err, trs, env.want)
				}
				want := make([]byte, len(env.remote))
				for i := 0; i < sh.n; i++ {
					copy(want[i*sh.rstride:i*sh.rstride+size], env.local[i*sh.lstride:])
				}
				if !bytes.Equal(env.remote, want) {
					t.Fatal("target memory differs from the extents' bytes")
				}
				clear(env.local)
				if _, err := env.run(t, Request{Op: OpRead, Segment: env.seg, Extents: ext}); err != nil {
					t.Fatalf("read: %v", err)
				}
				for i := 0; i < sh.n; i++ {
					if !bytes.Equal(env.local[i*sh.lstride:i*sh.lstride+size], want[i*sh.rstride:i*sh.rstride+size]) {
						t.Fatalf("read extent %d differs", i)
					}
				}
			})
		}
	}
}

// TestScatterGatherRejects: malformed scatter-gather requests fail Submit
// with ErrInvalid (overlapping destinations, empty extents); an extent
// outside the peer's registered memory fails the whole request with
// ErrOutOfBounds, writes nothing (a peer serving scatter-gather checks
// every extent first), and the peer keeps serving.
func TestScatterGatherRejects(t *testing.T) {
	for name, env := range vecEnvs(t) {
		t.Run(name, func(t *testing.T) {
			l, r := AddrOf(env.local), uint64(AddrOf(env.remote))
			bad := map[string][]Extent{
				"remote overlap": {{Local: l, Remote: r, Length: 100}, {Local: l + 4096, Remote: r + 50, Length: 100}},
				"local overlap":  {{Local: l + 4096, Remote: r, Length: 100}, {Local: l + 4000, Remote: r + 8192, Length: 100}},
				"empty extent":   {{Local: l, Remote: r, Length: 100}, {Local: l + 4096, Remote: r + 4096, Length: 0}},
				"none":           {},
				"unregistered":   {{Local: 4096, Remote: r, Length: 100}},
			}
			for what, ext := range bad {
				op := OpWrite
				if what == "local overlap" {
					op = OpRead // overlapping destinations
				}
				_, err := env.ini.Submit(ctxT(t), []Request{{Op: op, Segment: env.seg, Extents: ext}})
				if err == nil || (what != "unregistered" && !errors.Is(err, ErrInvalid)) || (what == "unregistered" && !errors.Is(err, ErrNotRegistered)) {
					t.Fatalf("%s: Submit err %v", what, err)
				}
			}
			// Overlapping sources are fine: the same bytes written twice.
			if _, err := env.run(t, Request{Op: OpWrite, Segment: env.seg, Extents: []Extent{{Local: l, Remote: r, Length: 100}, {Local: l + 50, Remote: r + 4096, Length: 100}}}); err != nil {
				t.Fatalf("overlapping sources: %v", err)
			}
			clear(env.remote)
			for i := range env.local {
				env.local[i] = 0xAB
			}
			past := []Extent{
				{Local: l, Remote: r, Length: 4096},
				{Local: l + 8192, Remote: r + uint64(len(env.remote)) - 100, Length: 200}, // runs past the buffer's end
			}
			_, err := env.run(t, Request{Op: OpWrite, Segment: env.seg, Extents: past})
			if !errors.Is(err, ErrOutOfBounds) {
				t.Fatalf("extent past the end: %v, want ErrOutOfBounds", err)
			}
			// A peer without scatter-gather gets plain slices, each checked
			// on its own: the request fails, its in-bounds pieces may land.
			if name != "tcp-plain" && bytes.IndexByte(env.remote, 0xAB) >= 0 {
				t.Fatal("a rejected scatter-gather write touched the target")
			}
			// The peer keeps serving.
			ok := []Extent{{Local: l, Remote: r, Length: 4096}, {Local: l + 8192, Remote: r + 16384, Length: 4096}}
			if _, err := env.run(t, Request{Op: OpWrite, Segment: env.seg, Extents: ok}); err != nil {
				t.Fatalf("after a rejected request: %v", err)
			}
			if env.remote[0] != 0xAB || env.remote[16384] != 0xAB || env.remote[8192] != 0 {
				t.Fatal("the request after a rejected one did not land")
			}
		})
	}
}

// TestCoalesce: consecutive requests of one opcode, segment and grant
// become one scatter-gather request (at most maxExtents extents), others
// split the runs; the order is kept.
func TestCoalesce(t *testing.T) {
	w := func(l, r, n int) Request {
		return Request{Op: OpWrite, Segment: 1, Local: uintptr(l), Remote: uint64(r), Length: n}
	}
	in := []Request{w(0, 0, 10), w(10, 10, 10), w(40, 100, 5), {Op: OpRead, Segment: 1, Local: 50, Remote: 50, Length: 3}, w(60, 60, 1), w(61, 61, 1), w(62, 62, 1)}
	out := Coalesce(in, 2)
	got := ""
	for _, r := range out {
		got += fmt.Sprintf("[%d %d %d %d]", r.Op, len(r.Extents), r.Length, r.Local)
	}
	want := fmt.Sprintf("[%d 2 20 0][%d 0 5 40][%d 0 3 50][%d 2 2 0][%d 0 1 62]", OpWrite, OpWrite, OpRead, OpWrite, OpWrite)
	if got != want {
		t.Fatalf("Coalesce = %s, want %s", got, want)
	}
}

// TestScatterGatherAcrossBuffers: one request whose extents alternate
// between two local buffers and two remote buffers (the shape of a write
// between TP ranks, one region per rank), on every transport: every byte
// lands where its extent says.
func TestScatterGatherAcrossBuffers(t *testing.T) {
	const piece, n = 1 << 10, 64
	for name, env := range vecEnvs(t) {
		t.Run(name, func(t *testing.T) {
			local2 := make([]byte, n*piece)
			if err := env.ini.RegisterBytes(local2, "cpu:0"); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = env.ini.Unregister(AddrOf(local2)) }()
			remote2, err := env.tgt.AllocateManaged(n * piece)
			if err != nil {
				t.Fatal(err)
			}
			if err := env.ini.PreparePeer(ctxT(t), env.tgt.Name()); err != nil { // learn of remote2
				t.Fatal(err)
			}
			for i := range local2 {
				local2[i], env.local[i] = byte(i*5+1), byte(i*3+2)
			}
			clear(env.remote)
			clear(remote2)
			var ext []Extent
			for i := 0; i < n; i++ {
				ext = append(ext,
					Extent{Local: AddrOf(env.local) + uintptr(i*piece), Remote: uint64(AddrOf(remote2)) + uint64((n-1-i)*piece), Length: piece},
					Extent{Local: AddrOf(local2) + uintptr(i*piece), Remote: uint64(AddrOf(env.remote)) + uint64(i*piece), Length: piece})
			}
			trs, err := env.run(t, Request{Op: OpWrite, Segment: env.seg, Extents: ext})
			if err != nil {
				t.Fatal(err)
			}
			if name == TransportShm && trs[0] != TransportShm {
				t.Fatalf("served by %s, want shm", trs[0])
			}
			for i := 0; i < n; i++ {
				if !bytes.Equal(remote2[(n-1-i)*piece:(n-i)*piece], env.local[i*piece:(i+1)*piece]) ||
					!bytes.Equal(env.remote[i*piece:(i+1)*piece], local2[i*piece:(i+1)*piece]) {
					t.Fatalf("extent pair %d differs", i)
				}
			}
		})
	}
}

// TestNoOverlap: interleaved streams (the extents of a write between TP
// ranks), random orders and overlaps in and across streams, checked
// against a brute-force pairwise test.
func TestNoOverlap(t *testing.T) {
	brute := func(ext []Extent) bool {
		for i := range ext {
			for j := range i {
				a, b := ext[i], ext[j]
				if a.Remote < b.Remote+uint64(b.Length) && b.Remote < a.Remote+uint64(a.Length) {
					return false
				}
			}
		}
		return true
	}
	var cases [][]Extent
	// 4 streams (regions at descending addresses), block-major, 2 KiB pieces.
	var tp []Extent
	for b := 0; b < 64; b++ {
		for r := 0; r < 4; r++ {
			tp = append(tp, Extent{Remote: uint64(1<<30 - r<<20 + b*2048), Length: 2048})
		}
	}
	cases = append(cases, tp, append(slices.Clone(tp), Extent{Remote: uint64(1<<30 - 1<<20 + 5*2048 + 100), Length: 10}))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		n := 1 + rng.IntN(40)
		var ext []Extent
		for range n {
			ext = append(ext, Extent{Remote: uint64(rng.IntN(4000)), Length: 1 + rng.IntN(100)})
		}
		cases = append(cases, ext)
	}
	for i, ext := range cases {
		if got, want := noOverlap(ext, false) == nil, brute(ext); got != want {
			t.Fatalf("case %d: noOverlap says disjoint=%v, brute force %v: %v", i, got, want, ext)
		}
	}
}

// TestScatterGatherAcrossAdjacentPeerBuffers: two of the peer's buffers
// lie back to back, and a request's extents end one and start the next
// from local pieces that are not adjacent; the TCP slicer merges the
// remote ranges into one extent across both buffers, which the lane serves
// one buffer at a time (each still bounds-checked). A range running past
// the second buffer is still refused.
func TestScatterGatherAcrossAdjacentPeerBuffers(t *testing.T) {
	const piece = 4 << 10
	env := newSuiteEnv(t, TransportTCP)
	back := make([]byte, 4*piece)
	first, second := back[:2*piece], back[2*piece:]
	for _, b := range [][]byte{first, second} {
		if err := env.tgt.RegisterBytes(b, "cpu:0"); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		_ = env.tgt.Unregister(AddrOf(first))
		_ = env.tgt.Unregister(AddrOf(second))
	}()
	if err := env.ini.PreparePeer(ctxT(t), env.tgt.Name()); err != nil {
		t.Fatal(err)
	}
	for i := range env.local[:4*piece] {
		env.local[i] = byte(i*7 + 3)
	}
	l, r := AddrOf(env.local), uint64(AddrOf(first))
	// Local pieces in reverse order: nothing adjacent locally, every
	// remote range continuing the last.
	var ext []Extent
	for i := 0; i < 4; i++ {
		ext = append(ext, Extent{Local: l + uintptr((3-i)*piece), Remote: r + uint64(i*piece), Length: piece})
	}
	if _, err := env.run(t, Request{Op: OpWrite, Segment: env.seg, Extents: ext}); err != nil {
		t.Fatalf("write across two adjacent peer buffers: %v", err)
	}
	for i := 0; i < 4; i++ {
		if !bytes.Equal(back[i*piece:(i+1)*piece], env.local[(3-i)*piece:(4-i)*piece]) {
			t.Fatalf("piece %d differs", i)
		}
	}
	got := make([]byte, 4*piece)
	if err := env.ini.RegisterBytes(got, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.ini.Unregister(AddrOf(got)) }()
	var rext []Extent
	for i := 0; i < 4; i++ {
		rext = append(rext, Extent{Local: AddrOf(got) + uintptr((3-i)*piece), Remote: r + uint64(i*piece), Length: piece})
	}
	if _, err := env.run(t, Request{Op: OpRead, Segment: env.seg, Extents: rext}); err != nil {
		t.Fatalf("read across two adjacent peer buffers: %v", err)
	}
	if !bytes.Equal(got, env.local[:4*piece]) {
		t.Fatal("read back differs")
	}
	past := []Extent{{Local: l, Remote: r + 3*piece, Length: piece}, {Local: l + 2*piece, Remote: r + 4*piece, Length: piece}}
	if _, err := env.run(t, Request{Op: OpWrite, Segment: env.seg, Extents: past}); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("a range past the second buffer: %v, want ErrOutOfBounds", err)
	}
}
