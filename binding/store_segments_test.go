package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/store"
)

// TestExtraSegments: mount_segment maps a file and mounts it as one more
// segment of the client (values put there land in the file),
// allocate_and_mount_segment rounds up to the slab size, bad offsets and
// ranges are refused, unknown ids fail the unmount while the known ones
// are still unmounted, and unmounted segments take no more puts.
func TestExtraSegments(t *testing.T) {
	s := inProcessStore(t)
	path := filepath.Join(t.TempDir(), "seg")
	if err := os.WriteFile(path, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	x := s.extra
	if _, err := x.mountFile(path, 1, 4096); !errors.Is(err, errInvalidParams) {
		t.Fatalf("unaligned offset: %v", err)
	}
	if _, err := x.mountFile(path, 1<<20, 2<<20); !errors.Is(err, errInvalidParams) {
		t.Fatalf("range past the end: %v", err)
	}
	if _, err := x.mountFile(filepath.Join(t.TempDir(), "none"), 0, 4096); !errors.Is(err, errInvalidParams) {
		t.Fatalf("missing file: %v", err)
	}
	if ids, err := x.mountFile(path, 0, 0); err != nil || len(ids) != 0 {
		t.Fatalf("size 0: %v %v", ids, err)
	}
	ids, err := x.mountFile(path, 1<<20, 1<<20)
	if err != nil || len(ids) != 1 {
		t.Fatalf("mount: %v %v", ids, err)
	}
	v := bytes.Repeat([]byte("extra segment!"), 100)
	if err := s.c.PutWith(t.Context(), "k", v, store.PutOptions{PreferredSegments: ids}); err != nil {
		t.Fatal(err)
	}
	if info, err := s.c.Stat(t.Context(), "k"); err != nil || info.Replicas[0].Segment != ids[0] {
		t.Fatalf("stat: %+v %v", info, err)
	}
	aids, n, err := x.allocate(1)
	if err != nil || len(aids) != 1 || n != slabSize {
		t.Fatalf("allocate: %v %d %v", aids, n, err)
	}
	if _, _, err := x.allocate(0); !errors.Is(err, errInvalidParams) {
		t.Fatalf("allocate 0: %v", err)
	}
	err = x.unmount([]string{ids[0], "1-2", aids[0]}, 0)
	if !errors.Is(err, errInvalidParams) {
		t.Fatalf("unmount with an unknown id: %v", err)
	}
	if len(x.segs) != 0 {
		t.Fatalf("%d segments still mounted", len(x.segs))
	}
	// The value went to the file (MAP_SHARED); the segment is gone.
	b, _ := os.ReadFile(path)
	if !bytes.Contains(b[1<<20:], v) {
		t.Fatal("the value is not in the mapped file")
	}
	if _, err := s.c.Get(t.Context(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after unmount: %v", err)
	}
	start := time.Now()
	if err := x.unmount([]string{ids[0]}, time.Second); !errors.Is(err, errInvalidParams) || time.Since(start) > time.Second {
		t.Fatalf("second unmount: %v", err)
	}
	// A dummy client has no extra segments.
	if _, err := segmentsOf(&storeState{}); !errors.Is(err, errInvalidParams) {
		t.Fatalf("dummy: %v", err)
	}
}

// TestStoreDiskTier: setup with SSD offload opens the disk tier behind the
// client's segment (its reads served at a URL) and closes it with the
// store; without a segment the option is refused.
func TestStoreDiskTier(t *testing.T) {
	dir := t.TempDir()
	if _, err := openDiskTier(storeArgs{disk: diskArgs{Dir: dir}}, "127.0.0.1"); !errors.Is(err, errInvalidParams) {
		t.Fatalf("no segment: %v", err)
	}
	if d, err := openDiskTier(storeArgs{}, "127.0.0.1"); d != nil || err != nil {
		t.Fatalf("no dir: %v %v", d, err)
	}
	s := inProcessStore(t)
	d, err := openDiskTier(storeArgs{segmentSize: 1 << 20, disk: diskArgs{Dir: dir, Capacity: 1 << 20, OffloadOnEvict: true, PromotionOnHit: true}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !d.OffloadOnEvict() || !d.PromotionOnHit() || d.Capacity() != 1<<20 || d.URL() == "" {
		t.Fatalf("tier %s: %v %v %d", d.URL(), d.OffloadOnEvict(), d.PromotionOnHit(), d.Capacity())
	}
	if _, err := openDiskTier(storeArgs{segmentSize: 1 << 20, disk: diskArgs{Dir: dir}}, ""); err == nil {
		t.Fatal("two tiers opened on one directory")
	}
	closeDisk(d)
	if s.diskReads() != 0 {
		t.Fatalf("disk reads %d", s.diskReads())
	}
	if s2 := (&storeState{}); s2.diskReads() != 0 {
		t.Fatal("a handle without a store client counts reads")
	}
}
