package main

/*
#include <stdint.h>
*/
import "C"

import (
	"unsafe"
)

// Thin cgo wrappers of store_more.go. Every wrapper runs under guard.

// mc_store_put_ex stores n bytes at p under key with a put_ex configuration
// (JSON, see putConfigJSON). 0 or a negative code.
//
//export mc_store_put_ex
func mc_store_put_ex(h C.int64_t, key *C.char, p unsafe.Pointer, n C.uint64_t, cfg *C.char) C.int64_t {
	return withStore(h, "put", func(s *storeState) (int64, error) {
		o, err := putOptionsEx(goString(cfg))
		if err != nil {
			return 0, err
		}
		v, err := view(p, n)
		if err != nil {
			return 0, err
		}
		return 0, s.putEx(goString(key), v, o)
	})
}

// mc_store_batch_put_ex is mc_store_put_ex for n keys; out gets one code per key.
//
//export mc_store_batch_put_ex
func mc_store_batch_put_ex(h, n C.int64_t, keys **C.char, ptrs *unsafe.Pointer, sizes *C.uint64_t, cfg *C.char, out *C.int64_t) C.int64_t {
	return withStore(h, "batch put", func(s *storeState) (int64, error) {
		if n <= 0 || keys == nil || ptrs == nil || sizes == nil || out == nil {
			return 0, errInvalid("batch put: empty batch or NULL array")
		}
		o, err := putOptionsEx(goString(cfg))
		if err != nil {
			return 0, err
		}
		k := int(n)
		ks, ps, ns, rs := cStrings(keys, k), unsafe.Slice(ptrs, k), u64s(sizes, k), i64s(out, k)
		if errs, ok := s.batchPutEx(ks, ps, ns, o); ok {
			for i, err := range errs {
				rs[i] = 0
				if err != nil {
					rs[i] = record("batch put", err)
				}
			}
			return 0, nil
		}
		eachView("batch put", ps, ns, rs, func(i int, v []byte) (int64, error) {
			return 0, s.putEx(ks[i], v, o)
		})
		return 0, nil
	})
}

// mc_store_batch_remove removes n keys; out gets one code per key.
//
//export mc_store_batch_remove
func mc_store_batch_remove(h, n C.int64_t, keys **C.char, force C.int64_t, out *C.int64_t) C.int64_t {
	return withStore(h, "batch remove", func(s *storeState) (int64, error) {
		if n <= 0 || keys == nil || out == nil {
			return 0, errInvalid("batch remove: empty batch or NULL array")
		}
		errs := s.batchRemove(cStrings(keys, int(n)), force != 0)
		rs := i64s(out, int(n))
		for i := range rs {
			var e error
			if i < len(errs) {
				e = errs[i]
			}
			rs[i] = guard("batch remove", func() (int64, error) { return 0, e })
		}
		return 0, nil
	})
}

// mc_store_stat hands key's size and replicas (JSON) through out.
//
//export mc_store_stat
func mc_store_stat(h C.int64_t, key *C.char, out *unsafe.Pointer) C.int64_t {
	return storeBytes(h, "get replica desc", out, func(s *storeState) ([]byte, error) {
		return s.stat(goString(key))
	})
}

// mc_store_hostname copies the client's "host:port" into buf (NUL-terminated,
// truncated to capacity) and returns its full length.
//
//export mc_store_hostname
func mc_store_hostname(h C.int64_t, buf *C.char, capacity C.int64_t) C.int64_t {
	var name string
	rc := withStore(h, "get hostname", func(s *storeState) (int64, error) {
		name = s.hostname()
		return 0, nil
	})
	if rc < 0 {
		return rc
	}
	if buf != nil && capacity > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity))
		k := copy(dst[:len(dst)-1], name)
		dst[k] = 0
	}
	return C.int64_t(len(name))
}
