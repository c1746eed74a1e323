package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// onHandle runs fn under guard on the object that byHandle finds for h; op
// names the call in the recorded error.
func onHandle[T any](byHandle func(int64) (T, error), h C.int64_t, op string, fn func(T) (int64, error)) C.int64_t {
	return C.int64_t(guard(op, func() (int64, error) {
		s, err := byHandle(int64(h))
		if err != nil {
			return 0, err
		}
		return fn(s)
	}))
}

// bytesOnHandle is onHandle for a call that returns bytes: they go through
// out (see cOut).
func bytesOnHandle[T any](byHandle func(int64) (T, error), h C.int64_t, op string, out *unsafe.Pointer, fn func(T) ([]byte, error)) C.int64_t {
	var data []byte
	rc := onHandle(byHandle, h, op, func(s T) (int64, error) {
		var err error
		data, err = fn(s)
		return 0, err
	})
	if rc < 0 {
		return rc
	}
	return cOut(data, out)
}

// withStore is onHandle for a store handle.
func withStore(h C.int64_t, op string, fn func(s *storeState) (int64, error)) C.int64_t {
	return onHandle(storeByHandle, h, op, fn)
}

// storeBytes is bytesOnHandle for a store handle.
func storeBytes(h C.int64_t, op string, out *unsafe.Pointer, fn func(s *storeState) ([]byte, error)) C.int64_t {
	return bytesOnHandle(storeByHandle, h, op, out, fn)
}

// withEngine is onHandle for an engine handle.
func withEngine(h C.int64_t, op string, fn func(s *engineState) (int64, error)) C.int64_t {
	return onHandle(engineByHandle, h, op, fn)
}

// engineBytes is bytesOnHandle for an engine handle.
func engineBytes(h C.int64_t, op string, out *unsafe.Pointer, fn func(s *engineState) ([]byte, error)) C.int64_t {
	return bytesOnHandle(engineByHandle, h, op, out, fn)
}

// engineAddr runs fn on engine handle h's engine under guard: the address it
// returns, or 0 on an error (recorded).
func engineAddr(h C.int64_t, op string, fn func(s *engineState) (uint64, error)) C.uint64_t {
	var addr uint64
	rc := withEngine(h, op, func(s *engineState) (int64, error) {
		var err error
		addr, err = fn(s)
		return 0, err
	})
	if rc < 0 {
		return 0
	}
	return C.uint64_t(addr)
}

// eachView runs one for every buffer (ps[i], ns[i] bytes) of a batch, 8 at a
// time, each under guard; rs[i] gets its result or error code.
func eachView(op string, ps []unsafe.Pointer, ns []uint64, rs []int64, one func(i int, v []byte) (int64, error)) {
	batch(len(rs), func(i int) {
		rs[i] = guard(op, func() (int64, error) {
			v, err := view(ps[i], C.uint64_t(ns[i]))
			if err != nil {
				return 0, err
			}
			return one(i, v)
		})
	})
}

// closeHandle removes handle h from tbl and closes what it held; kind
// ("store", "engine") names it in errors.
func closeHandle[T interface{ close() error }](tbl *handles[T], h C.int64_t, kind string) C.int64_t {
	return C.int64_t(guard(kind+" close", func() (int64, error) {
		s, ok := tbl.remove(int64(h))
		if !ok {
			return 0, fmt.Errorf("%s %d: %w", kind, h, errBadHandle)
		}
		return 0, s.close()
	}))
}
