package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"time"
	"unsafe"

	"github.com/kvcache-go/mooncake/internal/dummyclient"
	"github.com/kvcache-go/mooncake/store"
)

// storeClient is what a store handle drives: a real store client, or a
// dummy client whose calls the real client (`mooncake client`) serves.
type storeClient interface {
	dummyclient.Backend // the calls a dummy client forwards
	Close() error
	Segment() []byte
}

var (
	_ storeClient = (*store.Client)(nil)
	_ storeClient = (*dummyclient.Client)(nil)
)

// openDummy attaches to the real client serving addr with a shared pool of
// poolSize bytes (Mooncake's setup_dummy).
func openDummy(ctx context.Context, poolSize uint64, addr string) (*storeState, error) {
	if addr == "" {
		return nil, errInvalid("setup_dummy: no real client address")
	}
	c, err := dummyclient.Dial(ctx, addr, poolSize)
	if err != nil {
		return nil, err
	}
	return &storeState{c: c, bufs: map[uint64][]byte{}}, nil
}

// mc_store_open_dummy is setup_dummy: a store handle served by the real
// client at addr. The local buffer size is accepted for Mooncake's
// signature; values outside the pool travel through the socket instead.
//
//export mc_store_open_dummy
func mc_store_open_dummy(poolSize, bufferSize C.uint64_t, addr *C.char) C.int64_t {
	return C.int64_t(guard("setup_dummy", func() (int64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := openDummy(ctx, uint64(poolSize), goString(addr))
		if err != nil {
			return 0, err
		}
		return stores.add(s), nil
	}))
}

// mc_store_alloc_from_pool hands out size bytes of a dummy client's shared
// pool; 0 when the handle is not a dummy or the pool is used up.
//
//export mc_store_alloc_from_pool
func mc_store_alloc_from_pool(h C.int64_t, size C.uint64_t) unsafe.Pointer {
	var p unsafe.Pointer
	guard("alloc_from_mem_pool", func() (int64, error) {
		var err error
		p, err = allocFromPool(int64(h), uint64(size))
		return 0, err
	})
	return p
}

// allocFromPool is size bytes of the dummy handle h's shared pool.
func allocFromPool(h int64, size uint64) (unsafe.Pointer, error) {
	s, err := storeByHandle(h)
	if err != nil {
		return nil, err
	}
	d, ok := s.c.(*dummyclient.Client)
	if !ok {
		return nil, errInvalid("alloc_from_mem_pool: only dummy clients have a shared pool")
	}
	b := d.Alloc(size)
	if b == nil {
		return nil, errInvalid("alloc_from_mem_pool: the pool is used up")
	}
	return unsafe.Pointer(unsafe.SliceData(b)), nil
}
