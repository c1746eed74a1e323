package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"unsafe"
)

// main is required by -buildmode=c-shared and never runs.
func main() {}

// mc_last_error copies the reason of the most recent failure (NUL-terminated,
// truncated to capacity) into buf and returns its full length. The reason
// does not repeat the name of the call that failed: the caller adds it.
//
//export mc_last_error
func mc_last_error(buf *C.char, capacity C.int64_t) C.int64_t {
	msg := lastError()
	if buf != nil && capacity > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity))
		n := copy(dst[:len(dst)-1], msg)
		dst[n] = 0
	}
	return C.int64_t(len(msg))
}

// mc_free releases a buffer the library returned through an out pointer.
//
//export mc_free
func mc_free(p unsafe.Pointer) {
	if p != nil {
		C.free(p)
	}
}

// cOut hands b to C as a malloc'd buffer through out and returns its length.
func cOut(b []byte, out *unsafe.Pointer) C.int64_t {
	if out == nil {
		return C.int64_t(record("output", errInvalid("nil output pointer")))
	}
	n := len(b)
	p := C.malloc(C.size_t(n + 1))
	if p == nil {
		return C.int64_t(record("output", errInvalid("out of memory")))
	}
	if n > 0 {
		copy(unsafe.Slice((*byte)(p), n), b)
	}
	*out = p
	return C.int64_t(n)
}

// goString converts a possibly NULL C string.
func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

func u64s(p *C.uint64_t, n int) []uint64 {
	if p == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), n)
}

func i64s(p *C.int64_t, n int) []int64 {
	if p == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(p)), n)
}

func cStrings(p **C.char, n int) []string {
	if p == nil || n <= 0 {
		return nil
	}
	ptrs := unsafe.Slice(p, n)
	out := make([]string, n)
	for i, s := range ptrs {
		out[i] = goString(s)
	}
	return out
}
