package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/kvcache-go/mooncake/store"
)

// rangeReader is the ranged read of a *store.Client (a dummy client has none).
type rangeReader interface {
	GetRanges(ctx context.Context, key string, offs []uint64, dsts [][]byte) error
}

// mc_store_get_ranges copies n byte ranges of key's value into memory
// registered with register_buffer: lens[i] bytes from offset offs[i] of the
// value to ptrs[i]. 0, or a code: -600 a range outside the value or outside
// registered memory (or a dummy client), -704 no such key, -707 the read
// outlived its lease.
//
//export mc_store_get_ranges
func mc_store_get_ranges(h C.int64_t, key *C.char, n C.int64_t, offs *C.uint64_t, ptrs *unsafe.Pointer, lens *C.uint64_t) C.int64_t {
	return withStore(h, "get ranges", func(s *storeState) (int64, error) {
		rr, ok := s.c.(rangeReader)
		if !ok {
			return 0, errInvalid("ranged reads need a real client (not a dummy)")
		}
		if n < 0 || n > 1<<24 || (n > 0 && (offs == nil || ptrs == nil || lens == nil)) {
			return 0, errInvalid("bad range list")
		}
		os := u64s(offs, int(n))
		ls := u64s(lens, int(n))
		var ps []unsafe.Pointer
		if n > 0 {
			ps = unsafe.Slice(ptrs, int(n))
		}
		dsts := make([][]byte, n)
		for i := range dsts {
			v, err := view(ps[i], C.uint64_t(ls[i]))
			if err != nil {
				return 0, err
			}
			if len(v) > 0 && !s.regs.contains(uint64(uintptr(ps[i])), ls[i]) {
				return 0, errInvalid(fmt.Sprintf("range %d (%p+%d) is not inside memory registered with register_buffer", i, ps[i], ls[i]))
			}
			dsts[i] = v
		}
		ctx, cancel := s.ctx(0)
		defer cancel()
		return 0, rr.GetRanges(ctx, goString(key), os, dsts)
	})
}

var _ rangeReader = (*store.Client)(nil)
