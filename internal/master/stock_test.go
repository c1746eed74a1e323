package master

import (
	"fmt"
	"testing"
)

// prepare stocks two chunks more than the objects and keys fill, within
// the bounds; the chunks taken are zeroed and of full size; drop empties
// the stock.
func TestChunkStock(t *testing.T) {
	var s chunkStock
	s.prepare(recChunk+1, 10)
	if len(s.recs) != 3 || len(s.keys) != 2 {
		t.Fatalf("stocked %d record and %d key chunks, want 3 and 2", len(s.recs), len(s.keys))
	}
	s.prepare(100*recChunk, 100*arenaChunk)
	if len(s.recs) != maxStockRecs || len(s.keys) != maxStockKeys {
		t.Fatalf("stocked %d record and %d key chunks, want the bounds %d and %d", len(s.recs), len(s.keys), maxStockRecs, maxStockKeys)
	}
	r, k := s.takeRecs(), s.takeKeys()
	if len(r) != recChunk || len(k) != arenaChunk {
		t.Fatalf("chunks of %d records and %d bytes", len(r), len(k))
	}
	for i := range r {
		if r[i] != (object{}) {
			t.Fatalf("record %d not zero: %+v", i, r[i])
		}
	}
	for i, b := range k {
		if b != 0 {
			t.Fatalf("key byte %d not zero", i)
		}
	}
	s.drop()
	if s.takeRecs() != nil || s.takeKeys() != nil {
		t.Fatal("chunks left after drop")
	}
}

// A restore past the first full record chunk takes stocked chunks; every
// object is found under its key with its fields, and the stock is empty
// once the session ends.
func TestRestoreTakesStockedChunks(t *testing.T) {
	const n = recChunk + recChunk/2
	m, err := New(Config{Durable: true}, newFakeClock())
	if err != nil {
		t.Fatal(err)
	}
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: n * 128}
	held := make([]HeldObject, n)
	for i := range held {
		held[i] = HeldObject{Segment: "a", Offset: uint64(i) * 128, Key: fmt.Sprintf("k/%07d", i), Size: uint64(8 + i%50), CRC: uint32(i), Seq: uint64(i + 1)}
	}
	id, err := m.RestoreBegin("c", []SegmentSpec{spec})
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 16384
	stocked := false
	for i := 0; i < n; i += chunk {
		if _, err := m.RestoreChunk("c", id, uint32(i/chunk), held[i:min(n, i+chunk)]); err != nil {
			t.Fatal(err)
		}
		m.stock.mu.Lock()
		stocked = stocked || len(m.stock.recs) > 0
		m.stock.mu.Unlock()
	}
	if !stocked {
		t.Fatal("no record chunk stocked during the restore")
	}
	if _, err := m.RestoreEnd("c", id); err != nil {
		t.Fatal(err)
	}
	if m.stock.takeRecs() != nil || m.stock.takeKeys() != nil {
		t.Fatal("chunks left in the stock after the session ended")
	}
	for _, h := range held {
		o := m.objects.get(h.Key)
		if o == nil || o.size != h.Size || o.crc != h.CRC || o.seq != h.Seq || m.objects.key(o) != h.Key {
			t.Fatalf("%s: %+v", h.Key, o)
		}
	}
	checkRestored(t, m)
}
