package disktier

import (
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/kvcache-go/mooncake/internal/objheader"
)

func object(key string, seq uint64, n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(i*7) + byte(seq)
	}
	h := objheader.Header{Key: key, Seq: seq, Size: uint64(n), CRC: crc32.Checksum(v, castagnoli)}
	return append(objheader.Encode(make([]byte, objheader.Len(key)), h), v...)
}

// TestDiskTierCapacityChecksumsReopen: the tier keeps to its capacity
// (least recently used dropped and reported), refuses an object that does
// not match its CRC32C, serves values over HTTP, deletes only old enough
// versions, drops a corrupted file when reopened, and keeps the rest.
func TestDiskTierCapacityChecksumsReopen(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(Config{Dir: dir, Capacity: 3 * (4096 + 4096), // three files: the header block and the value
		OffloadOnEvict: true, PromotionOnHit: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []string{"a", "b", "c"} {
		if _, err := d.Store(object(k, uint64(i+1), 4096)); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	get := func(key, seq string) (int, []byte) {
		resp, err := http.Get(srv.URL + "/disk/object?key=" + key + "&seq=" + seq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := get("a", "1"); code != 200 || len(b) != 4096 || b[1] != 8 { // a is now the most recently used
		t.Fatalf("get a: %d %d", code, len(b))
	}
	if code, _ := get("a", "9"); code != 404 {
		t.Fatal("wrong version served")
	}
	if _, err := d.Store(object("d", 4, 4096)); err != nil {
		t.Fatal(err)
	}
	if dr := d.Dropped(); len(dr) != 1 || dr[0].Key != "b" {
		t.Fatalf("dropped %+v, want b (least recently used)", dr)
	}
	bad := object("e", 5, 100)
	bad[len(bad)-1] ^= 1
	if _, err := d.Store(bad); err == nil {
		t.Fatal("stored an object that does not match its CRC")
	}
	d.Delete("c", 2) // c is version 3: too new, kept
	d.Delete("a", 1)
	if got := len(d.Held()); got != 2 {
		t.Fatalf("held %d, want c and d", got)
	}
	// Corrupt d's file: reopening drops it and keeps c.
	f := d.file("d", 4)
	b, _ := os.ReadFile(f)
	b[len(b)-1] ^= 1
	os.WriteFile(f, b, 0o644)
	if _, err := Open(Config{Dir: dir}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open of a directory in use: %v, want ErrLocked", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(Config{Dir: dir, Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if h := d2.Held(); len(h) != 1 || h[0].Key != "c" || h[0].Seq != 3 {
		t.Fatalf("reopened: %+v", h)
	}
}

// TestListenServesAndReleases: Listen serves the tier's reads at its URL
// and Close stops the server and releases the directory.
func TestListenServesAndReleases(t *testing.T) {
	dir := t.TempDir()
	s, err := Listen(Config{Dir: dir, OffloadOnEvict: true}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !s.OffloadOnEvict() || s.PromotionOnHit() || s.Capacity() != 10<<30 {
		t.Fatalf("policies %v %v capacity %d", s.OffloadOnEvict(), s.PromotionOnHit(), s.Capacity())
	}
	if _, err := s.Store(object("k", 1, 100)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.URL() + "/disk/object?key=k&seq=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(b) != 100 {
		t.Fatalf("read: %d, %d bytes", resp.StatusCode, len(b))
	}
	if _, objects, reads := s.Usage(); objects != 1 || reads != 1 {
		t.Fatalf("usage: %d objects, %d reads", objects, reads)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(s.URL() + "/disk/object?key=k&seq=1"); err == nil {
		t.Fatal("reads still served after Close")
	}
	s2, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	defer s2.Close()
	if len(s2.Held()) != 1 {
		t.Fatal("the copy did not survive Close")
	}
}
