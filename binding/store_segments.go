package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/kvcache-go/mooncake/store"
)

// This file is Mooncake's mount_segment family: extra memory segments a
// real client contributes besides the one setup() mounted. Each extra
// segment is a store client of its own (the memory as store.Config.Segment,
// a Mooncake-style id "first-second" as its name) on the store's transfer
// engine, so the master sees one more segment of this process, and unmounting
// it is that client's graceful Close.

// slabSize is Mooncake's allocation unit of allocate_and_mount_segment
// (cachelib's slab): sizes are rounded up to it.
const slabSize = 4 << 20

// extraSegments are the extra segments of one store handle.
type extraSegments struct {
	master string
	mover  store.Mover
	sec    storeSecurity

	mu   sync.Mutex
	segs map[string]*extraSegment
}

type extraSegment struct {
	c      *store.Client
	mem    []byte
	mapped bool // mem is an mmap of a file (mount_segment); else Go memory (allocate_and_mount_segment)
}

func newExtraSegments(master string, mover store.Mover, sec storeSecurity) *extraSegments {
	return &extraSegments{master: master, mover: mover, sec: sec, segs: map[string]*extraSegment{}}
}

// segmentID is a Mooncake UUID string: two decimal 64-bit numbers.
func segmentID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatUint(binary.LittleEndian.Uint64(b[:8]), 10) + "-" + strconv.FormatUint(binary.LittleEndian.Uint64(b[8:]), 10)
}

func (x *extraSegments) mount(mem []byte, mapped bool) (string, error) {
	id := segmentID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := store.New(ctx, store.Config{Master: x.master, Mover: x.mover, Segment: mem, SegmentName: id,
		LocalBufferSize: 64 << 10, Secret: os.Getenv("MOONCAKE_SECRET"), TenantID: x.sec.tenantID, Token: x.sec.token,
		TLS: x.sec.tls, MountProof: x.sec.mountProof(), Logger: logger.With("segment", id)})
	if err != nil {
		return "", x.sec.mountHint(err)
	}
	x.mu.Lock()
	x.segs[id] = &extraSegment{c: c, mem: mem, mapped: mapped}
	x.mu.Unlock()
	return id, nil
}

// mountFile maps size bytes of the file at path from offset (a multiple of
// the page size; Mooncake's mount_segment) and mounts them.
func (x *extraSegments) mountFile(path string, offset, size uint64) ([]string, error) {
	if size == 0 {
		return []string{}, nil // Mooncake mounts nothing and succeeds
	}
	if offset%uint64(os.Getpagesize()) != 0 {
		return nil, errInvalid(fmt.Sprintf("mount_segment: offset %d is not a multiple of the page size", offset))
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, errInvalid("mount_segment: " + err.Error())
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if offset > uint64(st.Size()) || size > uint64(st.Size())-offset {
		return nil, errInvalid(fmt.Sprintf("mount_segment: %d bytes at %d outside %s (%d bytes)", size, offset, path, st.Size()))
	}
	mem, err := syscall.Mmap(int(f.Fd()), int64(offset), int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mount_segment: mmap %s: %w", path, err)
	}
	id, err := x.mount(mem, true)
	if err != nil {
		_ = syscall.Munmap(mem)
		return nil, err
	}
	return []string{id}, nil
}

// allocate mounts size bytes (rounded up to the slab size) of new memory
// (Mooncake's allocate_and_mount_segment).
func (x *extraSegments) allocate(size uint64) ([]string, uint64, error) {
	if size == 0 || size > 1<<44 {
		return nil, 0, errInvalid(fmt.Sprintf("allocate_and_mount_segment: size %d", size))
	}
	size = (size + slabSize - 1) / slabSize * slabSize
	id, err := x.mount(make([]byte, size), false)
	if err != nil {
		return nil, 0, err
	}
	return []string{id}, size, nil
}

// unmount unmounts the segments (waiting up to grace for readers) and
// releases their memory. Unknown ids are skipped and make the result -1,
// as in Mooncake; the others are still unmounted.
func (x *extraSegments) unmount(ids []string, grace time.Duration) error {
	var errs []error
	for _, id := range ids {
		x.mu.Lock()
		s := x.segs[id]
		delete(x.segs, id)
		x.mu.Unlock()
		if s == nil {
			errs = append(errs, errInvalid(fmt.Sprintf("unmount_segment: no mounted segment %q", id)))
			continue
		}
		errs = append(errs, s.close(grace))
	}
	return errors.Join(errs...)
}

func (s *extraSegment) close(grace time.Duration) error {
	err := s.c.CloseWithGrace(grace)
	if s.mapped {
		err = errors.Join(err, syscall.Munmap(s.mem))
	}
	return err
}

// closeAll unmounts every extra segment (the store is closing).
func (x *extraSegments) closeAll() {
	if x == nil {
		return
	}
	x.mu.Lock()
	segs := x.segs
	x.segs = map[string]*extraSegment{}
	x.mu.Unlock()
	for _, s := range segs {
		_ = s.close(0)
	}
}

// segmentsOf is the handle's extra segments; a dummy client has none (its
// real client owns the memory): Mooncake answers -1 there.
func segmentsOf(s *storeState) (*extraSegments, error) {
	if s.extra == nil {
		return nil, errInvalid("mounting segments needs a real client (setup, not setup_dummy)")
	}
	return s.extra, nil
}

// mc_store_mount_segment mounts size bytes of the file at path from offset;
// the segment ids (JSON) go through out.
//
//export mc_store_mount_segment
func mc_store_mount_segment(h C.int64_t, path *C.char, offset, size C.uint64_t, out *unsafe.Pointer) C.int64_t {
	return storeBytes(h, "mount_segment", out, func(s *storeState) ([]byte, error) {
		x, err := segmentsOf(s)
		if err != nil {
			return nil, err
		}
		ids, err := x.mountFile(goString(path), uint64(offset), uint64(size))
		if err != nil {
			return nil, err
		}
		return json.Marshal(ids)
	})
}

// mc_store_allocate_segment allocates and mounts size bytes (rounded up to
// the slab size, written to allocated); the ids (JSON) go through out.
//
//export mc_store_allocate_segment
func mc_store_allocate_segment(h C.int64_t, size C.uint64_t, allocated *C.uint64_t, out *unsafe.Pointer) C.int64_t {
	return storeBytes(h, "allocate_and_mount_segment", out, func(s *storeState) ([]byte, error) {
		x, err := segmentsOf(s)
		if err != nil {
			return nil, err
		}
		ids, n, err := x.allocate(uint64(size))
		if err != nil {
			return nil, err
		}
		if allocated != nil {
			*allocated = C.uint64_t(n)
		}
		return json.Marshal(ids)
	})
}

// mc_store_unmount_segments unmounts the segments named in ids (JSON array),
// waiting up to graceMs for readers.
//
//export mc_store_unmount_segments
func mc_store_unmount_segments(h C.int64_t, ids *C.char, graceMs C.int64_t) C.int64_t {
	return withStore(h, "unmount_segment", func(s *storeState) (int64, error) {
		x, err := segmentsOf(s)
		if err != nil {
			return 0, err
		}
		var list []string
		if err := json.Unmarshal([]byte(goString(ids)), &list); err != nil {
			return 0, errInvalid("unmount_segment: segment ids: " + err.Error())
		}
		if graceMs < 0 {
			return 0, errInvalid("unmount_segment: negative grace period")
		}
		return 0, x.unmount(list, time.Duration(graceMs)*time.Millisecond)
	})
}
