package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// mc_gather_copy copies n source buffers (srcs[i], sizes[i] bytes) one after
// another into dst (dstLen bytes) and returns the bytes copied: the copy of
// Mooncake's mooncake._fast_copy.concat_arrays_into. The sources are split
// into up to threads contiguous runs copied in parallel. A total larger than
// dstLen is refused with -600 before anything is written.
//
//export mc_gather_copy
func mc_gather_copy(dst unsafe.Pointer, dstLen C.uint64_t, n C.int64_t, srcs *unsafe.Pointer, sizes *C.uint64_t, threads C.int64_t) C.int64_t {
	return C.int64_t(guard("gather copy", func() (int64, error) {
		if n < 0 || n > 1<<24 || (n > 0 && (srcs == nil || sizes == nil)) {
			return 0, errInvalid("bad source list")
		}
		if n == 0 {
			return 0, nil
		}
		ps := unsafe.Slice(srcs, int(n))
		ns := u64s(sizes, int(n))
		var total uint64
		for i, sz := range ns {
			if sz > 0 && ps[i] == nil {
				return 0, errInvalid(fmt.Sprintf("source %d is NULL", i))
			}
			if sz > 1<<40 || total+sz > 1<<40 {
				return 0, errInvalid("sources too large")
			}
			total += sz
		}
		if total > uint64(dstLen) {
			return 0, errInvalid(fmt.Sprintf("destination buffer too small: need %d bytes, got %d", total, uint64(dstLen)))
		}
		if total == 0 {
			return 0, nil
		}
		if dst == nil {
			return 0, errInvalid("destination is NULL")
		}
		out := unsafe.Slice((*byte)(dst), int(total))
		gatherCopy(out, ps, ns, int(threads))
		return int64(total), nil
	}))
}

// gatherCopy copies the sources back to back into out (exactly their total
// size), in up to threads runs of consecutive sources at once.
func gatherCopy(out []byte, ps []unsafe.Pointer, ns []uint64, threads int) {
	n := len(ps)
	threads = max(1, min(threads, n, 64))
	per := (n + threads - 1) / threads
	var wg sync.WaitGroup
	off := 0
	for start := 0; start < n; start += per {
		end := min(start+per, n)
		runOff := off
		for _, sz := range ns[start:end] {
			off += int(sz)
		}
		run := func() {
			o := runOff
			for i := start; i < end; i++ {
				if ns[i] == 0 {
					continue
				}
				o += copy(out[o:], unsafe.Slice((*byte)(ps[i]), int(ns[i])))
			}
		}
		if end == n {
			run() // the last run on the calling goroutine
		} else {
			wg.Go(run)
		}
	}
	wg.Wait()
}
