package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/logtest"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// restoreSpec is the segment of the chunked restore tests (1 MiB).
var restoreSpec = SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: 1 << 20}

func rep(off uint64, key string, seq uint64) HeldObject {
	return HeldObject{Segment: "a", Offset: off, Key: key, Size: 1000, CRC: 1, Seq: seq}
}

// restoreChunks runs one session over chunks and sums the results.
func restoreChunks(t *testing.T, m *Master, client string, chunks ...[]HeldObject) RestoreResult {
	t.Helper()
	id, err := m.RestoreBegin(client, []SegmentSpec{restoreSpec})
	if err != nil {
		t.Fatal(err)
	}
	var res RestoreResult
	for i, c := range chunks {
		r, err := m.RestoreChunk(client, id, uint32(i), c)
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		res.add(r)
	}
	r, err := m.RestoreEnd(client, id)
	if err != nil {
		t.Fatal(err)
	}
	res.add(r)
	return res
}

func newDurable(t *testing.T) (*Master, interface{ Advance(time.Duration) }) {
	t.Helper()
	clk := newFakeClock()
	m, err := New(Config{Durable: true}, clk)
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

func seqOf(t *testing.T, m *Master, key string) uint64 {
	t.Helper()
	info, err := m.Query(key)
	if err != nil || len(info.Replicas) != 1 {
		t.Fatalf("%s: %+v %v", key, info, err)
	}
	return info.Replicas[0].Seq
}

func tombOffsets(refs []HeaderRef) []uint64 {
	var out []uint64
	for _, r := range refs {
		out = append(out, r.Offset)
	}
	slices.Sort(out)
	return out
}

// TestRestoreChunked: the cases of a restore split into chunks, each
// against the result it must have.
func TestRestoreChunked(t *testing.T) {
	const hdr = 1088 // a report's span: 1000 bytes and a 64-byte header, rounded
	tests := []struct {
		name      string
		chunks    [][]HeldObject
		restored  int
		dropped   int
		tombs     []uint64 // offsets of the tombstones returned
		seq       map[string]uint64
		gone      []string
		usedBytes uint64
	}{
		{name: "older version, newer in a later chunk",
			chunks:   [][]HeldObject{{rep(0, "k", 10)}, {rep(4096, "k", 20)}},
			restored: 1, dropped: 1, tombs: []uint64{0}, seq: map[string]uint64{"k": 20}, usedBytes: hdr + 64},
		{name: "newer version, older in a later chunk",
			chunks:   [][]HeldObject{{rep(0, "k", 20)}, {rep(4096, "k", 10)}},
			restored: 1, dropped: 1, tombs: []uint64{4096}, seq: map[string]uint64{"k": 20}, usedBytes: hdr + 64},
		{name: "overlap across the boundary, the later report newer",
			chunks:   [][]HeldObject{{rep(0, "w", 1), rep(8192, "x", 5)}, {rep(8192+512, "y", 6), rep(16384, "z", 1)}},
			restored: 3, dropped: 1, tombs: []uint64{8192}, seq: map[string]uint64{"w": 1, "y": 6, "z": 1}, gone: []string{"x"}, usedBytes: 3*hdr + 64},
		{name: "overlap across the boundary, the later report older",
			chunks:   [][]HeldObject{{rep(8192, "x", 6)}, {rep(8192+512, "y", 5)}, {rep(16384, "z", 1)}},
			restored: 2, dropped: 1, seq: map[string]uint64{"x": 6, "z": 1}, gone: []string{"y"}, usedBytes: 2 * hdr},
		{name: "overlap chain over three chunks",
			// a is overlapped by b (newer, wins); c is inside b and older;
			// d starts after b: each chunk holds one report.
			chunks:   [][]HeldObject{{rep(0, "a", 1)}, {rep(512, "b", 2)}, {rep(1024, "c", 1)}, {rep(2048, "d", 1)}},
			restored: 2, dropped: 2, tombs: []uint64{0}, seq: map[string]uint64{"b": 2, "d": 1}, gone: []string{"a", "c"}, usedBytes: 2*hdr + 64},
		{name: "reports behind the decided offset are dropped",
			chunks:   [][]HeldObject{{rep(8192, "x", 1)}, {rep(16384, "y", 1)}, {rep(0, "late", 1)}},
			restored: 2, dropped: 1, seq: map[string]uint64{"x": 1, "y": 1}, gone: []string{"late"}, usedBytes: 2 * hdr},
		{name: "one chunk unsorted",
			chunks:   [][]HeldObject{{rep(16384, "y", 1), rep(100, "bad", 1), rep(0, "x", 1), rep(1<<20, "out", 1)}},
			restored: 2, dropped: 2, seq: map[string]uint64{"x": 1, "y": 1}, gone: []string{"bad", "out"}, usedBytes: 2 * hdr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newDurable(t)
			res := restoreChunks(t, m, "c", tt.chunks...)
			if res.Restored != tt.restored || res.Dropped != tt.dropped || !slices.Equal(tombOffsets(res.Tombstones), tt.tombs) {
				t.Fatalf("result %+v (tombstones at %v), want restored %d dropped %d tombstones %v",
					res, tombOffsets(res.Tombstones), tt.restored, tt.dropped, tt.tombs)
			}
			for k, seq := range tt.seq {
				if got := seqOf(t, m, k); got != seq {
					t.Fatalf("%s: seq %d, want %d", k, got, seq)
				}
			}
			for _, k := range tt.gone {
				if ok, _ := m.Exist(k); ok {
					t.Fatalf("%s restored", k)
				}
			}
			if got := m.Stats().Used; got != tt.usedBytes {
				t.Fatalf("used %d, want %d", got, tt.usedBytes)
			}
			if got := tombOffsets(m.Tombstones()); !slices.Equal(got, tt.tombs) {
				t.Fatalf("master tombstones at %v, want %v", got, tt.tombs)
			}
			checkRestored(t, m)
		})
	}
}

// TestRestoreChunkTwice: a chunk sent twice (a retried call) is taken
// once; a chunk past the window ends the session.
func TestRestoreChunkTwice(t *testing.T) {
	m, _ := newDurable(t)
	id, err := m.RestoreBegin("c", []SegmentSpec{restoreSpec})
	if err != nil {
		t.Fatal(err)
	}
	c0, c1 := []HeldObject{rep(0, "a", 1), rep(4096, "b", 1)}, []HeldObject{rep(8192, "c", 1)}
	for i, step := range []struct {
		n        uint32
		chunk    []HeldObject
		restored int
	}{{0, c0, 1}, {0, c0, 0}, {1, c1, 1}, {1, c1, 0}, {0, c0, 0}} {
		res, err := m.RestoreChunk("c", id, step.n, step.chunk)
		if err != nil || res.Restored != step.restored || res.Dropped != 0 {
			t.Fatalf("step %d (chunk %d): %+v %v", i, step.n, res, err)
		}
	}
	if res, err := m.RestoreEnd("c", id); err != nil || res.Restored != 1 {
		t.Fatalf("end: %+v %v", res, err)
	}
	if st := m.Stats(); st.Objects != 3 || st.Used != 3*1088 {
		t.Fatalf("stats after a repeated chunk: %+v", st)
	}
	for _, k := range []string{"a", "b", "c"} {
		if info, err := m.Query(k); err != nil || len(info.Replicas) != 1 {
			t.Fatalf("%s: %+v %v", k, info, err)
		}
	}

	// Past the window: refused, and the session is gone.
	m2, _ := newDurable(t)
	id, _ = m2.RestoreBegin("c", []SegmentSpec{restoreSpec})
	if _, err := m2.RestoreChunk("c", id, RestoreWindow, c1); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("chunk out of order: %v", err)
	}
	if _, err := m2.RestoreChunk("c", id, 0, c0); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("chunk of a dropped session: %v", err)
	}
	if _, err := m2.RestoreEnd("c", id+1); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("end of an unknown session: %v", err)
	}
}

// TestRestoreAbandoned: a node that dies or restarts its remount midway
// leaves nothing behind: the half-restored segment is dropped (its
// objects not counted as removed), and the next remount restores
// everything from the start.
func TestRestoreAbandoned(t *testing.T) {
	all := []HeldObject{rep(0, "a", 1), rep(4096, "b", 1), rep(8192, "c", 1), rep(12288, "d", 1)}
	for _, how := range []string{"expired", "replaced"} {
		t.Run(how, func(t *testing.T) {
			logs := &logtest.Recorder{}
			clk := newFakeClock()
			m, err := New(Config{Durable: true, Logger: slog.New(logs)}, clk)
			if err != nil {
				t.Fatal(err)
			}
			id, err := m.RestoreBegin("c", []SegmentSpec{restoreSpec})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.RestoreChunk("c", id, 0, all[:2]); err != nil {
				t.Fatal(err)
			}
			if ok, _ := m.Exist("a"); !ok {
				t.Fatal("a not restored by the first chunk")
			}
			if how == "expired" {
				clk.Advance(m.Config().ClientTTL + time.Second)
				if _, err := m.RestoreChunk("c", id, 1, all[2:]); !errors.Is(err, ErrInvalidParams) {
					t.Fatalf("chunk of an expired session: %v", err)
				}
				if len(m.Segments()) != 0 || m.Stats().Objects != 0 || len(m.restore.sessions) != 0 {
					t.Fatalf("expired session left %d segments, %d objects, %d sessions", len(m.Segments()), m.Stats().Objects, len(m.restore.sessions))
				}
			}
			// The next remount restores every object.
			res := restoreChunks(t, m, "c", all[:1], all[1:3], all[3:])
			if res.Restored != 4 || res.Dropped != 0 || len(res.Tombstones) != 0 {
				t.Fatalf("second remount: %+v", res)
			}
			if _, err := m.RestoreChunk("c", id, 1, all[2:]); !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("chunk of the first session after a second one: %v", err)
			}
			if st := m.Stats(); st.Objects != 4 || st.Used != 4*1088 || len(m.Segments()) != 1 || len(m.restore.sessions)+len(m.restore.segs) != 0 {
				t.Fatalf("after the second remount: %+v, %d segments, %d sessions", st, len(m.Segments()), len(m.restore.sessions))
			}
			checkRestored(t, m)
			// Each refusal and drop was logged at WARN with its reason.
			want := map[string]string{"expired": "expired", "replaced": "replaced by a new remount"}[how]
			if got := warnReasons(logs); !slices.Contains(got, "dropped: "+want) || !slices.Contains(got, "refused") {
				t.Fatalf("warnings %q, want the drop (%s) and a refused call", got, want)
			}
		})
	}
}

// warnReasons lists the restore warnings: "dropped: reason" or "refused".
func warnReasons(c *logtest.Recorder) []string {
	var out []string
	for _, r := range c.Records() {
		switch {
		case r.Level != slog.LevelWarn:
		case r.Message == "master: restore session dropped":
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "reason" {
					out = append(out, "dropped: "+a.Value.String())
				}
				return true
			})
		case r.Message == "master: restore call refused: no such session":
			out = append(out, "refused")
		}
	}
	return out
}

// TestRestoreRemovedInLaterChunk: a key removed on this master before
// the restore, or while it runs, stays removed when a later chunk reports
// it; its header is returned as a tombstone.
func TestRestoreRemovedInLaterChunk(t *testing.T) {
	m, _ := newDurable(t)
	other := SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 2 << 30, Size: 1 << 20}
	if err := m.MountSegment("w", other); err != nil {
		t.Fatal(err)
	}
	mustPut(t, m, "early", 100, ReplicateConfig{})
	earlySeq := seqOf(t, m, "early")
	if err := m.Remove("early", false); err != nil {
		t.Fatal(err)
	}
	id, err := m.RestoreBegin("c", []SegmentSpec{restoreSpec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.RestoreChunk("c", id, 0, []HeldObject{rep(0, "mid", 7), rep(4096, "x", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("mid", false); err != nil { // restored by chunk 0, removed before chunk 1
		t.Fatal(err)
	}
	later := []HeldObject{rep(8192, "early", earlySeq), rep(12288, "mid", 7), rep(16384, "y", 1)}
	r1, err := m.RestoreChunk("c", id, 1, later)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.RestoreEnd("c", id)
	if err != nil {
		t.Fatal(err)
	}
	r1.add(r2)
	// Restored: x (kept last in chunk 0, decided when chunk 1 began) and y.
	if r1.Restored != 2 || r1.Dropped != 2 || !slices.Equal(tombOffsets(r1.Tombstones), []uint64{8192, 12288}) {
		t.Fatalf("later chunk: %+v", r1)
	}
	for _, k := range []string{"early", "mid"} {
		if ok, _ := m.Exist(k); ok {
			t.Fatalf("removed key %s came back", k)
		}
	}
	for _, k := range []string{"x", "y"} {
		if ok, _ := m.Exist(k); !ok {
			t.Fatalf("%s not restored", k)
		}
	}
	checkRestored(t, m)
}

// TestRestorePutsBetweenChunks: while a segment is restored, puts (even
// those preferring it) go to other segments, so nothing
// lands where a later chunk reports an object; once the restore ends the
// segment takes puts again.
func TestRestorePutsBetweenChunks(t *testing.T) {
	m, _ := newDurable(t)
	other := SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 2 << 30, Size: 1 << 20}
	if err := m.MountSegment("w", other); err != nil {
		t.Fatal(err)
	}
	id, err := m.RestoreBegin("c", []SegmentSpec{restoreSpec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.RestoreChunk("c", id, 0, []HeldObject{rep(64<<10, "first", 1), rep(512<<10, "second", 1)}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		reps := mustPut(t, m, fmt.Sprint("new", i), 3000, ReplicateConfig{Replicas: 2, PreferredSegments: []string{"a"}})
		if len(reps) != 1 || reps[0].Segment != "b" {
			t.Fatalf("put during the restore: %+v", reps)
		}
	}
	if _, err := m.RestoreChunk("c", id, 1, []HeldObject{rep(600<<10, "third", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RestoreEnd("c", id); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"first", "second", "third"} {
		if ok, _ := m.Exist(k); !ok {
			t.Fatalf("%s not restored", k)
		}
	}
	if reps := mustPut(t, m, "after", 200<<10, ReplicateConfig{PreferredSegments: []string{"a"}}); reps[0].Segment != "a" {
		t.Fatalf("put after the restore: %+v", reps)
	}
	checkRestored(t, m)
}

// TestRestoreChunkingInvariant: however the reports are cut into chunks,
// the restore ends in the same state (random reports with overlaps,
// versions and bad entries).
func TestRestoreChunkingInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		var held []HeldObject
		for off := uint64(0); off < 256<<10; off += 64 * uint64(1+rng.IntN(40)) {
			h := HeldObject{Segment: "a", Offset: off, Key: fmt.Sprint("k", rng.IntN(30)), Size: uint64(1 + rng.IntN(4000)), CRC: 1, Seq: uint64(1 + rng.IntN(50))}
			if rng.IntN(20) == 0 {
				h.Offset++ // misaligned
			}
			held = append(held, h)
		}
		type state struct {
			restored, dropped int
			used              uint64
			objects           int
			tombs             string
			seqs              string
		}
		snapshot := func(m *Master, res RestoreResult) state {
			s := state{restored: res.Restored, dropped: res.Dropped, used: m.Stats().Used, objects: m.Stats().Objects,
				tombs: fmt.Sprint(tombOffsets(m.Tombstones()))}
			for i := range 30 {
				if info, err := m.Query(fmt.Sprint("k", i)); err == nil {
					s.seqs += fmt.Sprintf("k%d@%d:%d ", i, info.Replicas[0].Addr, info.Replicas[0].Seq)
				}
			}
			return s
		}
		var want state
		for i, size := range []int{len(held), 1, 2, 7} {
			m, _ := newDurable(t)
			var chunks [][]HeldObject
			for j := 0; j < len(held); j += size {
				chunks = append(chunks, held[j:min(len(held), j+size)])
			}
			got := snapshot(m, restoreChunks(t, m, "c", chunks...))
			checkRestored(t, m)
			if i == 0 {
				want = got
				continue
			}
			if got != want {
				t.Fatalf("round %d, chunks of %d: %+v, in one chunk: %+v", round, size, got, want)
			}
		}
	}
}

// BenchmarkRestore: a segment of 200,000 reports restored from chunks
// of each size (as a node sends them: 16384 is the store client's bound,
// 200000 an old client's single message). probe-max-ms is the longest a
// concurrent Exist waited: the longest hold of the master's lock, which
// the master bounds to RestoreChunkObjects reports whatever the chunk.
func BenchmarkRestore(b *testing.B) {
	const n = 200_000
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: n * 128}
	held := make([]HeldObject, n)
	for i := range held {
		held[i] = HeldObject{Segment: "a", Offset: uint64(i) * 128, Key: fmt.Sprintf("d/%06d", i), Size: 8, CRC: 1, Seq: uint64(i + 1)}
	}
	for _, size := range []int{RestoreChunkObjects, 16384, n} {
		b.Run(fmt.Sprint("chunk=", size), func(b *testing.B) {
			b.ReportAllocs()
			var probeMax time.Duration
			for b.Loop() {
				m, err := New(Config{Durable: true}, newFakeClock())
				if err != nil {
					b.Fatal(err)
				}
				stop, done := make(chan struct{}), make(chan time.Duration)
				go func() {
					var longest time.Duration
					for {
						select {
						case <-stop:
							done <- longest
							return
						default:
						}
						start := time.Now()
						m.Exist("d/000000")
						longest = max(longest, time.Since(start))
					}
				}()
				id, _ := m.RestoreBegin("c", []SegmentSpec{spec})
				for i := 0; i < n; i += size {
					if _, err := m.RestoreChunk("c", id, uint32(i/size), held[i:min(n, i+size)]); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := m.RestoreEnd("c", id); err != nil {
					b.Fatal(err)
				}
				close(stop)
				probeMax = max(probeMax, <-done)
				if m.Stats().Objects != n {
					b.Fatalf("%d objects restored", m.Stats().Objects)
				}
			}
			b.ReportMetric(float64(probeMax.Microseconds())/1000, "probe-max-ms")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/report")
		})
	}
}

// checkRestored checks a master after a restore ended (or was dropped): no
// replicas overlap, and the allocators, keys, counts and listing index
// agree with the objects.
func checkRestored(t *testing.T, m *Master) {
	t.Helper()
	checkNoOverlap(t, m)
	checkInvariants(t, m)
}

// TestRestorePipelined: chunks sent at once, within the window and in any
// order (a node with several calls in flight), restore exactly what the
// same chunks sent one after the other do.
func TestRestorePipelined(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 10 {
		var held []HeldObject
		for off := uint64(0); off < 256<<10; off += 64 * uint64(1+rng.IntN(40)) {
			held = append(held, HeldObject{Segment: "a", Offset: off, Key: fmt.Sprint("k", rng.IntN(30)), Size: uint64(1 + rng.IntN(4000)), CRC: 1, Seq: uint64(1 + rng.IntN(50))})
		}
		var chunks [][]HeldObject
		for j := 0; j < len(held); j += 5 {
			chunks = append(chunks, held[j:min(len(held), j+5)])
		}
		seq, _ := newDurable(t)
		want := restoreChunks(t, seq, "c", chunks...)

		m, _ := newDurable(t)
		id, err := m.RestoreBegin("c", []SegmentSpec{restoreSpec})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RestoreExpect("c", id, uint64(len(held))); err != nil {
			t.Fatal(err)
		}
		results := make([]RestoreResult, len(chunks))
		for g := 0; g < len(chunks); g += RestoreWindow {
			group := rng.Perm(min(RestoreWindow, len(chunks)-g))
			errs := make(chan error, len(group))
			for _, i := range group {
				go func() {
					var err error
					results[g+i], err = m.RestoreChunkContext(t.Context(), "c", id, uint32(g+i), chunks[g+i])
					errs <- err
				}()
			}
			for range group {
				if err := <-errs; err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
		}
		var got RestoreResult
		for _, r := range results {
			got.add(r)
		}
		end, err := m.RestoreEnd("c", id)
		if err != nil {
			t.Fatal(err)
		}
		got.add(end)
		checkRestored(t, m)
		if got.Restored != want.Restored || got.Dropped != want.Dropped || !slices.Equal(tombOffsets(got.Tombstones), tombOffsets(want.Tombstones)) {
			t.Fatalf("round %d: pipelined %d restored, %d dropped, tombstones %v; one by one %d, %d, %v", round,
				got.Restored, got.Dropped, tombOffsets(got.Tombstones), want.Restored, want.Dropped, tombOffsets(want.Tombstones))
		}
		if a, b := m.Stats(), seq.Stats(); a.Objects != b.Objects || a.Used != b.Used {
			t.Fatalf("round %d: pipelined %+v, one by one %+v", round, a, b)
		}
		for i := range 30 {
			k := fmt.Sprint("k", i)
			a, errA := m.Query(k)
			b, errB := seq.Query(k)
			if (errA == nil) != (errB == nil) || (errA == nil && (a.Replicas[0].Addr != b.Replicas[0].Addr || a.Replicas[0].Seq != b.Replicas[0].Seq)) {
				t.Fatalf("round %d: %s pipelined %+v %v, one by one %+v %v", round, k, a, errA, b, errB)
			}
		}
	}
}

// TestRestoreCutWhileWaiting: a chunk waiting for one that never comes (the
// node's calls cut in the middle of a session) drops the session when its
// call gives up, as does a new remount of the node; the next remount
// restores everything.
func TestRestoreCutWhileWaiting(t *testing.T) {
	all := []HeldObject{rep(0, "a", 1), rep(4096, "b", 1), rep(8192, "c", 1), rep(12288, "d", 1)}
	for _, how := range []string{"given up", "replaced"} {
		t.Run(how, func(t *testing.T) {
			m, _ := newDurable(t)
			id, err := m.RestoreBegin("c", []SegmentSpec{restoreSpec})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.RestoreChunk("c", id, 0, all[:1]); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { // chunk 2 waits for chunk 1, which is never sent
				_, err := m.RestoreChunkContext(ctx, "c", id, 2, all[2:])
				done <- err
			}()
			waitfor.Cond(t, 10*time.Second, "chunk 2 waiting for its turn", func() bool { return m.restoreWaiting("c") })
			var next uint64
			if how == "given up" {
				cancel()
			} else if next, err = m.RestoreBegin("c", []SegmentSpec{restoreSpec}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, ErrInvalidParams) {
					t.Fatalf("waiting chunk: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiting chunk did not end")
			}
			if how == "given up" {
				if len(m.Segments()) != 0 || m.Stats().Objects != 0 || len(m.restore.sessions) != 0 {
					t.Fatalf("after the cut: %d segments, %d objects, %d sessions", len(m.Segments()), m.Stats().Objects, len(m.restore.sessions))
				}
				res := restoreChunks(t, m, "c", all[:2], all[2:])
				if res.Restored != 4 {
					t.Fatalf("next remount: %+v", res)
				}
			} else {
				for i, c := range [][]HeldObject{all[:2], all[2:]} {
					if _, err := m.RestoreChunk("c", next, uint32(i), c); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := m.RestoreEnd("c", next); err != nil {
					t.Fatal(err)
				}
			}
			if st := m.Stats(); st.Objects != 4 || len(m.restore.sessions)+len(m.restore.segs) != 0 {
				t.Fatalf("after the next remount: %+v, %d sessions", st, len(m.restore.sessions))
			}
			checkRestored(t, m)
		})
	}
}

// restoreWaiting reports whether client's session has a chunk waiting for
// its turn.
func (m *Master) restoreWaiting(client string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess := m.restore.sessions[client]
	return sess != nil && sess.waiting > 0
}

// TestPutDuringRestoreEvictsNothing: after a restart, a put that arrives
// while the only segment is still being restored finds no segment to take
// it: it fails with ErrNoSpace, and evicts none of the objects restored so
// far (an eviction could not make room on a segment being restored, and
// would drop acknowledged objects for nothing). Once the restore ends the
// put is placed.
func TestPutDuringRestoreEvictsNothing(t *testing.T) {
	m, _ := newDurable(t)
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: 1 << 20}
	id, err := m.RestoreBegin("c", []SegmentSpec{spec})
	if err != nil {
		t.Fatal(err)
	}
	var held []HeldObject
	for i := range 10 {
		held = append(held, HeldObject{Segment: "a", Offset: uint64(i) * 4096, Key: fmt.Sprint("r/", i), Size: 1000, CRC: 1, Seq: uint64(i + 1)})
	}
	if _, err := m.RestoreChunk("c", id, 0, held); err != nil {
		t.Fatal(err)
	}
	before := m.Stats().Objects // all but the last report, decided at the end
	if _, err := m.PutStart("w", "new", 1000, ReplicateConfig{}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put during the restore: %v, want ErrNoSpace", err)
	}
	if st := m.Stats(); st.Evictions != 0 || st.Objects != before || before != 9 {
		t.Fatalf("after the refused put: %d evictions, %d objects, want 0 and %d (9)", st.Evictions, st.Objects, before)
	}
	if _, err := m.RestoreEnd("c", id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutStart("w", "new", 1000, ReplicateConfig{}); err != nil {
		t.Fatalf("put after the restore: %v", err)
	}
	for _, h := range held {
		if _, err := m.Query(h.Key); err != nil {
			t.Fatalf("restored %s: %v", h.Key, err)
		}
	}
}

// BenchmarkRestoreScale: one node's remount of MOONCAKE_RESTORE_OBJECTS
// reports (default 1M; keys obj/%09d in runs of 512 consecutive keys from
// 8 ranges interleaved, or with MOONCAKE_RESTORE_ORDER=batched in the
// order the master bench's loaders leave them: benchKeyOrder), in chunks
// of 16,384 as a node sends them, into an empty
// master sized by RestoreExpect: the master's cost per report at scale
// (ns/report), decoding excluded; lock-ns/report is the time holding the
// lock, index-wait-ns/report the time waiting for the listing index's
// inserts (its goroutines run behind). With MOONCAKE_RESTORE_GAPS=1 every
// other object's place is empty (as after removing half the keys).
func BenchmarkRestoreScale(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("MOONCAKE_RESTORE_OBJECTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	obj := uint64(128)
	step := obj
	if os.Getenv("MOONCAKE_RESTORE_GAPS") == "1" {
		step *= 2
	}
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: uint64(n+1) * step}
	random := os.Getenv("MOONCAKE_RESTORE_RANDOM") == "1" // keys in no order (hashes, as a KV cache's): no locality in the listing index
	held := make([]HeldObject, 0, n)
	for _, k := range benchKeyOrder(n, os.Getenv("MOONCAKE_RESTORE_ORDER")) {
		i := len(held)
		held = append(held, HeldObject{Segment: "a", Offset: uint64(i) * step, Key: benchKeyName(k, random),
			Size: 64, CRC: 1, Seq: uint64(i + 1)})
	}
	const chunk = 16384
	b.ReportAllocs()
	var decide, indexWait time.Duration // the sessions' time holding the lock, and waiting for the listing index (their end's log line)
	for b.Loop() {
		log := &decideLog{}
		m, err := New(Config{Durable: true, Logger: slog.New(log)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		id, err := m.RestoreBegin("c", []SegmentSpec{spec})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.RestoreExpect("c", id, uint64(n)); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i += chunk {
			if _, err := m.RestoreChunk("c", id, uint32(i/chunk), held[i:min(n, i+chunk)]); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := m.RestoreEnd("c", id); err != nil {
			b.Fatal(err)
		}
		if m.Stats().Objects != n {
			b.Fatalf("%d objects restored", m.Stats().Objects)
		}
		if keys := m.Summary().Keys; keys != n {
			b.Fatalf("%d keys listed", keys)
		}
		decide += log.decide
		indexWait += log.indexWait
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/report")
	b.ReportMetric(float64(decide.Nanoseconds())/float64(b.N*n), "lock-ns/report")
	b.ReportMetric(float64(indexWait.Nanoseconds())/float64(b.N*n), "index-wait-ns/report")
}

// decideLog is a slog handler that keeps the "decide" and "index_wait"
// figures of the last "restore session ended" line.
type decideLog struct{ decide, indexWait time.Duration }

func (d *decideLog) Enabled(context.Context, slog.Level) bool { return true }
func (d *decideLog) WithAttrs([]slog.Attr) slog.Handler       { return d }
func (d *decideLog) WithGroup(string) slog.Handler            { return d }
func (d *decideLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "decide":
			d.decide = a.Value.Duration()
		case "index_wait":
			d.indexWait = a.Value.Duration()
		}
		return true
	})
	return nil
}
