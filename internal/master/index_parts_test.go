package master

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// restoreKeys restores keys (one object each, 64 bytes at 128-byte
// offsets in their order) on segment a of client c, in chunks of chunk
// reports, and returns the restored count.
func restoreKeys(t *testing.T, m *Master, keys []string, chunk int) int {
	t.Helper()
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: uint64(len(keys)+1) * 128}
	held := make([]HeldObject, len(keys))
	for i, k := range keys {
		held[i] = HeldObject{Segment: "a", Offset: uint64(i) * 128, Key: k, Size: 64, CRC: 1, Seq: uint64(i + 1)}
	}
	id, err := m.RestoreBegin("c", []SegmentSpec{spec})
	if err != nil {
		t.Fatal(err)
	}
	restored := 0
	for i := 0; i < len(held); i += chunk {
		r, err := m.RestoreChunk("c", id, uint32(i/chunk), held[i:min(len(held), i+chunk)])
		if err != nil {
			t.Fatal(err)
		}
		restored += r.Restored
	}
	r, err := m.RestoreEnd("c", id)
	if err != nil {
		t.Fatal(err)
	}
	return restored + r.Restored
}

// indexBounds are the listing index's bounds and its partitions' sizes.
func indexBounds(m *Master) (bounds []string, sizes []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.index.acquire()
	defer m.index.release()
	for _, p := range m.index.parts {
		sizes = append(sizes, p.t.Len())
	}
	return slices.Clone(m.index.bounds), sizes
}

// listPrefix is every key List returns with prefix, after after, in pages
// of page.
func listPrefix(t *testing.T, m *Master, prefix, after string, page int) []string {
	t.Helper()
	var keys []string
	for {
		rows, next := m.List(prefix, after, page)
		for _, r := range rows {
			keys = append(keys, r.Key)
		}
		if next == "" {
			return keys
		}
		after = next
	}
}

// withPrefix is the keys of sorted (in order) that have prefix and sort
// after after.
func withPrefix(sorted []string, prefix, after string) []string {
	var out []string
	for _, k := range sorted {
		if strings.HasPrefix(k, prefix) && k > after {
			out = append(out, k)
		}
	}
	return out
}

// TestIndexPartsListing: a restore's keys, in no order, cut the listing
// index in key ranges; listings from every bound, from just before it,
// and of prefixes that cross bounds give exactly the keys in order; a
// range emptied by removals (walked over), a removed bound key put again,
// a removal by regex across ranges and a removal of all keep it so, and
// an empty index takes a pool of puts in one tree again.
func TestIndexPartsListing(t *testing.T) {
	const n = 20_000
	m, _ := newDurable(t)
	if err := m.MountSegment("w", SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 8 << 30, Size: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	onB := ReplicateConfig{PreferredSegments: []string{"b"}}
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, n)
	for i, p := range rng.Perm(n) {
		keys[i] = fmt.Sprintf("k/%05d", p)
	}
	if got := restoreKeys(t, m, keys, 4096); got != n {
		t.Fatalf("%d restored of %d", got, n)
	}
	bounds, sizes := indexBounds(m)
	if len(bounds) < indexParts-1 {
		t.Fatalf("bounds %q: want at least %d", bounds, indexParts-1)
	}
	for i, s := range sizes { // quantiles of the keys of the first batch
		if s < n/indexParts/2 || s > n/indexParts*2 {
			t.Fatalf("partition %d holds %d keys of %d (sizes %v)", i, s, n, sizes)
		}
	}
	sorted := slices.Sorted(slices.Values(keys))
	check := func(sorted []string) {
		t.Helper()
		if got := listAll(t, m); !slices.Equal(got, sorted) {
			t.Fatalf("listing: %d keys, want %d (in order)", len(got), len(sorted))
		}
		for _, b := range bounds {
			i, _ := slices.BinarySearch(sorted, b)
			for _, after := range []string{b, b[:len(b)-1], ""} {
				if after == "" && i > 0 {
					after = sorted[i-1] // the key just before the bound
				}
				want := withPrefix(sorted, "", after)
				rows, _ := m.List("", after, 3)
				if len(rows) != min(3, len(want)) {
					t.Fatalf("after %q: %d rows, want %d", after, len(rows), min(3, len(want)))
				}
				for j, r := range rows {
					if r.Key != want[j] {
						t.Fatalf("after %q: row %d is %q, want %q", after, j, r.Key, want[j])
					}
				}
			}
			for _, cut := range []int{0, 1, 2, 3} { // the bound as a prefix (a walk from it), prefixes across it
				prefix := b[:len(b)-cut]
				if got, want := listPrefix(t, m, prefix, "", 7), withPrefix(sorted, prefix, ""); !slices.Equal(got, want) {
					t.Fatalf("prefix %q: %d keys, want %d", prefix, len(got), len(want))
				}
			}
		}
		checkRestored(t, m)
	}
	check(sorted)

	// A range emptied (its bound key among its keys), the bound key put again.
	var kept []string
	for _, k := range sorted {
		if k >= bounds[2] && k < bounds[3] {
			if err := m.Remove(k, true); err != nil {
				t.Fatal(err)
			}
			continue
		}
		kept = append(kept, k)
	}
	if b, sizes := indexBounds(m); !slices.Equal(b, bounds) || sizes[3] != 0 {
		t.Fatalf("the range from %q emptied (kept while fewer than half are): bounds %q, sizes %v", bounds[2], b, sizes)
	}
	check(kept)
	mustPut(t, m, bounds[2], 64, onB)
	kept = slices.Sorted(slices.Values(append(kept, bounds[2])))
	check(kept)

	// A removal by regex across ranges.
	re := regexp.MustCompile(`^k/0[3-7]`)
	removed, err := m.RemoveByRegex(re.String(), true)
	if err != nil {
		t.Fatal(err)
	}
	before := len(kept)
	kept = slices.DeleteFunc(kept, re.MatchString)
	if removed != before-len(kept) || m.Stats().Objects != len(kept) {
		t.Fatalf("removed %d: %d objects left, want %d", removed, m.Stats().Objects, len(kept))
	}
	check(kept)

	// All removed: the next puts go in one tree.
	if got := m.RemoveAll(true); got != len(kept) {
		t.Fatalf("removed %d of %d", got, len(kept))
	}
	check(nil)
	mustPut(t, m, "p1", 64, onB)
	mustPut(t, m, "p0", 64, onB)
	if b, sizes := indexBounds(m); len(b) != 0 || len(sizes) != 1 {
		t.Fatalf("a pool of puts after all removed: bounds %q, partitions %v", b, sizes)
	}
	if got := listAll(t, m); !slices.Equal(got, []string{"p0", "p1"}) {
		t.Fatalf("listing %q", got)
	}
}

// TestIndexPartsRepartition: keys put and upserted before a restore (an
// index holding a few keys, some through entries) move to the ranges the
// restore's keys choose; puts, upserts and removals of them afterwards,
// and a walk from each, find them.
func TestIndexPartsRepartition(t *testing.T) {
	m, _ := newDurable(t)
	if err := m.MountSegment("w", SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 8 << 30, Size: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	onB := ReplicateConfig{PreferredSegments: []string{"b"}}
	upsert := func(k string) {
		t.Helper()
		slot, _, err := m.PutReserve("w", 64, len(k), onB)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := m.PutCommit("w", k, slot, 1, onB, true); err != nil {
			t.Fatal(err)
		}
	}
	var early []string
	for i := range 200 {
		k := fmt.Sprintf("k/%05d+", i*97)
		mustPut(t, m, k, 64, onB)
		if i%3 == 0 {
			upsert(k) // listed by an entry
		}
		early = append(early, k)
	}
	keys := make([]string, 0, 8192)
	for i := range cap(keys) {
		keys = append(keys, fmt.Sprintf("k/%05d", (i*7919)%cap(keys)))
	}
	if got := restoreKeys(t, m, keys, 8192); got != len(keys) {
		t.Fatalf("%d restored of %d", got, len(keys))
	}
	if b, _ := indexBounds(m); len(b) != indexParts-1 {
		t.Fatalf("bounds %q after the restore", b)
	}
	all := slices.Sorted(slices.Values(append(slices.Clone(keys), early...)))
	if got := listAll(t, m); !slices.Equal(got, all) {
		t.Fatalf("listing: %d keys, want %d", len(got), len(all))
	}
	for i, k := range early {
		switch i % 4 {
		case 0:
			upsert(k)
		case 1:
			if err := m.Remove(k, true); err != nil {
				t.Fatal(err)
			}
			all = slices.DeleteFunc(all, func(s string) bool { return s == k })
		}
	}
	checkListedExist(t, m, all)
	for _, k := range all[:100] {
		if rows, _ := m.List("", k[:len(k)-1], 1); len(rows) != 1 || rows[0].Key > k {
			t.Fatalf("a walk from before %q finds %v", k, rows)
		}
	}
	checkRestored(t, m)
}

// TestRestoreThenList: a restore of MOONCAKE_LIST_RESTORE_OBJECTS
// (default 200k) reports, keys in the master bench's load order (about
// ascending: the index's last partition cut by each batch), listed
// whole in pages, by prefixes, after a removal by regex of half of them,
// and after a removal of all.
func TestRestoreThenList(t *testing.T) {
	n := 200_000
	if testing.Short() || raceEnabled {
		n = 50_000
	}
	if s := os.Getenv("MOONCAKE_LIST_RESTORE_OBJECTS"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil {
			t.Fatal(err)
		}
	}
	keys := make([]string, 0, n)
	for _, i := range benchKeyOrder(n, "batched") {
		keys = append(keys, benchKeyName(i, false))
	}
	m, _ := newDurable(t)
	m.index.workers = 4
	if got := restoreKeys(t, m, keys, 16384); got != n {
		t.Fatalf("%d restored of %d", got, n)
	}
	// The keys come in about ascending order: each batch's keys above the
	// last partition's cut it (at least a cut per two parts of the
	// restore), and no partition is left with fewer than indexPiece/2.
	if b, sizes := indexBounds(m); len(b) < n/RestoreChunkObjects/2 || slices.Min(sizes) < indexPiece/2 {
		t.Fatalf("%d keys in %d partitions, sizes %v", n, len(sizes), sizes)
	}
	sorted := slices.Sorted(slices.Values(keys))
	if got := listPrefix(t, m, "", "", 10_000); !slices.Equal(got, sorted) {
		t.Fatalf("listing: %d keys, want %d in order", len(got), n)
	}
	for _, prefix := range []string{"obj/0000", "obj/00001", "obj/00002"} {
		if got, want := listPrefix(t, m, prefix, "", 999), withPrefix(sorted, prefix, ""); !slices.Equal(got, want) {
			t.Fatalf("prefix %q: %d keys, want %d", prefix, len(got), len(want))
		}
	}
	removed, err := m.RemoveByRegex(`[13579]$`, true)
	if err != nil {
		t.Fatal(err)
	}
	odd := regexp.MustCompile(`[13579]$`)
	kept := slices.DeleteFunc(sorted, odd.MatchString)
	if removed != n-len(kept) {
		t.Fatalf("removed %d, want %d", removed, n-len(kept))
	}
	if got := listPrefix(t, m, "", "", 10_000); !slices.Equal(got, kept) {
		t.Fatalf("listing after the removal: %d keys, want %d in order", len(got), len(kept))
	}
	// Removals of the lowest three fourths of the keys empty more than
	// half the partitions: the empty ones are dropped.
	_, sizesBefore := indexBounds(m)
	cut := len(kept) * 3 / 4
	for _, k := range kept[:cut] {
		if err := m.Remove(k, true); err != nil {
			t.Fatal(err)
		}
	}
	kept = kept[cut:]
	if _, sizes := indexBounds(m); len(sizes) >= len(sizesBefore) || 2*(len(sizes)-len(slices.DeleteFunc(slices.Clone(sizes), func(s int) bool { return s == 0 }))) >= len(sizes) {
		t.Fatalf("partitions %d before the removal of a range, %d after, sizes %v", len(sizesBefore), len(sizes), sizes)
	}
	if got := listPrefix(t, m, "", "", 10_000); !slices.Equal(got, kept) {
		t.Fatalf("listing after the removal of a range: %d keys, want %d in order", len(got), len(kept))
	}
	if got := listPrefix(t, m, "obj/0000", "", 1000); !slices.Equal(got, withPrefix(kept, "obj/0000", "")) {
		t.Fatalf("prefix listing over dropped partitions: %d keys", len(got))
	}
	if got := m.RemoveAll(true); got != len(kept) {
		t.Fatalf("removed %d of %d", got, len(kept))
	}
	if got := listAll(t, m); len(got) != 0 || m.Summary().Keys != 0 {
		t.Fatalf("%d keys listed after all removed", len(got))
	}
}

// TestIndexPartsSplitMoves: a restore in key order into an index already
// holding more keys than a batch, spread over the restore's range: the
// partition each batch falls in is cut anyway (the keys put before, above
// the first new bound, move), and the listing holds every key once, in
// order.
func TestIndexPartsSplitMoves(t *testing.T) {
	const n = 20_000
	m, _ := newDurable(t)
	if err := m.MountSegment("w", SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 8 << 30, Size: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	var all []string
	for i := range 3000 {
		k := fmt.Sprintf("k/%05d+", i*7%n)
		mustPut(t, m, k, 64, ReplicateConfig{PreferredSegments: []string{"b"}})
		all = append(all, k)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k/%05d", i)
	}
	m.index.workers = 4
	if got := restoreKeys(t, m, keys, 4096); got != n {
		t.Fatalf("%d restored of %d", got, n)
	}
	if b, sizes := indexBounds(m); len(b) < n/RestoreChunkObjects {
		t.Fatalf("%d partitions after a restore in key order over %d keys put before: sizes %v", len(sizes), len(all), sizes)
	}
	all = slices.Sorted(slices.Values(append(all, keys...)))
	if got := listAll(t, m); !slices.Equal(got, all) {
		t.Fatalf("listing: %d keys, want %d in order", len(got), len(all))
	}
	checkRestored(t, m)
}

// TestIndexPartsDropEmpty: removals that empty the first, the last and
// two neighbouring partitions (half of them) drop those four at once;
// keys put again in their ranges go to the partitions that took the
// ranges over, and the listing holds every key once, in order.
func TestIndexPartsDropEmpty(t *testing.T) {
	const n = 20_000
	m, _ := newDurable(t)
	if err := m.MountSegment("w", SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 8 << 30, Size: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	keys := make([]string, n)
	for i, p := range rng.Perm(n) {
		keys[i] = fmt.Sprintf("k/%05d", p)
	}
	restoreKeys(t, m, keys, 4096)
	bounds, sizes := indexBounds(m)
	if len(sizes) != indexParts {
		t.Fatalf("%d partitions, want %d", len(sizes), indexParts)
	}
	in := func(k string, i int) bool { // k in partition i
		return (i == 0 || k >= bounds[i-1]) && (i == len(bounds) || k < bounds[i])
	}
	var kept, gone []string
	for _, k := range slices.Sorted(slices.Values(keys)) {
		if in(k, 0) || in(k, 3) || in(k, 4) || in(k, 7) {
			gone = append(gone, k)
		} else {
			kept = append(kept, k)
		}
	}
	for _, k := range gone {
		if err := m.Remove(k, true); err != nil {
			t.Fatal(err)
		}
	}
	if b, sizes := indexBounds(m); len(sizes) != 4 || slices.Contains(sizes, 0) || !slices.Equal(b, []string{bounds[1], bounds[4], bounds[5]}) {
		t.Fatalf("after emptying partitions 0, 3, 4 and 7 of %q: bounds %q, sizes %v", bounds, b, sizes)
	}
	if got := listAll(t, m); !slices.Equal(got, kept) {
		t.Fatalf("listing: %d keys, want %d", len(got), len(kept))
	}
	for _, k := range []string{gone[0], gone[len(gone)-1], bounds[3], bounds[2] + "+", "a", "z"} {
		mustPut(t, m, k, 64, ReplicateConfig{PreferredSegments: []string{"b"}})
		kept = append(kept, k)
	}
	kept = slices.Sorted(slices.Values(kept))
	if got := listAll(t, m); !slices.Equal(got, kept) {
		t.Fatalf("listing: %d keys, want %d", len(got), len(kept))
	}
	checkRestored(t, m)
}
