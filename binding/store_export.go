package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unsafe"
)

// This file holds the thin cgo wrappers of the store client; the logic is in
// store.go. Every wrapper runs under guard (no panic crosses the ABI).

// view is the Go slice over n bytes of C memory at p.
func view(p unsafe.Pointer, n C.uint64_t) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if p == nil || uint64(n) > 1<<40 {
		return nil, errInvalid(fmt.Sprintf("buffer %p+%d", p, uint64(n)))
	}
	return unsafe.Slice((*byte)(p), int(n)), nil
}

// openExArgs is the JSON of mc_store_open_ex's options.
type openExArgs struct {
	Disk diskArgs `json:"disk"`
	securityArgs
	// Env holds environment variables as Python saw them at setup (the
	// library's own environment is the one it was loaded with): Mooncake's
	// MC_STORE_LOCAL_HOT_* settings of the client hot cache.
	Env map[string]string `json:"env"`
}

// mc_store_open_ex opens a store client (Mooncake's setup) and returns its
// handle: host, metadata, protocol and device as for mc_engine_open, a
// global segment of segmentSize bytes (0: none), a staging buffer of
// bufferSize bytes, the master's address, and options (JSON, see
// openExArgs; "" for none).
//
//export mc_store_open_ex
func mc_store_open_ex(host, metadata *C.char, segmentSize, bufferSize C.uint64_t, protocol, device, master, options *C.char) C.int64_t {
	return C.int64_t(guard("store setup", func() (int64, error) {
		var o openExArgs
		if opts := goString(options); opts != "" {
			if err := json.Unmarshal([]byte(opts), &o); err != nil {
				return 0, errInvalid("setup options: " + err.Error())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := openStore(ctx, storeArgs{host: goString(host), metadata: goString(metadata), protocol: goString(protocol),
			device: goString(device), master: goString(master), segmentSize: uint64(segmentSize), bufferSize: uint64(bufferSize),
			disk: o.Disk, security: o.securityArgs, env: o.Env})
		if err != nil {
			return 0, err
		}
		return stores.add(s), nil
	}))
}

//export mc_store_close
func mc_store_close(h C.int64_t) C.int64_t {
	return closeHandle(stores, h, "store")
}

//export mc_store_health
func mc_store_health(h C.int64_t) C.int64_t {
	return withStore(h, "health check", func(s *storeState) (int64, error) {
		return 0, s.health()
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

// mc_store_put_ex stores n bytes at p under key with a put configuration
// (JSON, see putConfigJSON). 0 or a negative code.
//
//export mc_store_put_ex
func mc_store_put_ex(h C.int64_t, key *C.char, p unsafe.Pointer, n C.uint64_t, cfg *C.char) C.int64_t {
	return withStore(h, "put", func(s *storeState) (int64, error) {
		o, err := putOptions(goString(cfg))
		if err != nil {
			return 0, err
		}
		v, err := view(p, n)
		if err != nil {
			return 0, err
		}
		return 0, s.put(goString(key), v, o)
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
		o, err := putOptions(goString(cfg))
		if err != nil {
			return 0, err
		}
		k := int(n)
		ks, ps, ns, rs := cStrings(keys, k), unsafe.Slice(ptrs, k), u64s(sizes, k), i64s(out, k)
		if errs, ok := s.batchPut(ks, ps, ns, o); ok {
			for i, err := range errs {
				rs[i] = 0
				if err != nil {
					rs[i] = record("batch put", err)
				}
			}
			return 0, nil
		}
		eachView("batch put", ps, ns, rs, func(i int, v []byte) (int64, error) {
			return 0, s.put(ks[i], v, o)
		})
		return 0, nil
	})
}

//export mc_store_get
func mc_store_get(h C.int64_t, key *C.char, out *unsafe.Pointer) C.int64_t {
	return storeBytes(h, "get", out, func(s *storeState) ([]byte, error) {
		return s.get(goString(key))
	})
}

//export mc_store_get_into
func mc_store_get_into(h C.int64_t, key *C.char, p unsafe.Pointer, n C.uint64_t) C.int64_t {
	return withStore(h, "get into", func(s *storeState) (int64, error) {
		v, err := view(p, n)
		if err != nil {
			return 0, err
		}
		got, err := s.getInto(goString(key), v)
		return int64(got), err
	})
}

//export mc_store_batch_get_into
func mc_store_batch_get_into(h, n C.int64_t, keys **C.char, ptrs *unsafe.Pointer, sizes *C.uint64_t, out *C.int64_t) C.int64_t {
	return withStore(h, "batch get into", func(s *storeState) (int64, error) {
		if n <= 0 || keys == nil || ptrs == nil || sizes == nil || out == nil {
			return 0, errInvalid("batch get into: empty batch or NULL array")
		}
		k := int(n)
		ks, ps, ns, rs := cStrings(keys, k), unsafe.Slice(ptrs, k), u64s(sizes, k), i64s(out, k)
		if got, errs, ok := s.batchGetInto(ks, ps, ns); ok {
			for i := range rs {
				rs[i] = int64(got[i])
				if errs[i] != nil {
					rs[i] = record("batch get into", errs[i])
				}
			}
			return 0, nil
		}
		eachView("batch get into", ps, ns, rs, func(i int, v []byte) (int64, error) {
			got, err := s.getInto(ks[i], v)
			return int64(got), err
		})
		return 0, nil
	})
}

//export mc_store_register_buffer
func mc_store_register_buffer(h C.int64_t, p unsafe.Pointer, n C.uint64_t) C.int64_t {
	return withStore(h, "register buffer", func(s *storeState) (int64, error) {
		v, err := view(p, n)
		if err != nil {
			return 0, err
		}
		return 0, s.registerBuffer(v)
	})
}

//export mc_store_unregister_buffer
func mc_store_unregister_buffer(h C.int64_t, p unsafe.Pointer) C.int64_t {
	return withStore(h, "unregister buffer", func(s *storeState) (int64, error) {
		return 0, s.unregisterBuffer(uint64(uintptr(p)))
	})
}

//export mc_store_exist
func mc_store_exist(h C.int64_t, key *C.char) C.int64_t {
	return withStore(h, "is exist", func(s *storeState) (int64, error) {
		ok, err := s.exist(goString(key))
		if ok {
			return 1, err
		}
		return 0, err
	})
}

//export mc_store_batch_exist
func mc_store_batch_exist(h, n C.int64_t, keys **C.char, out *C.int64_t) C.int64_t {
	return withStore(h, "batch is exist", func(s *storeState) (int64, error) {
		if n <= 0 || keys == nil || out == nil {
			return 0, errInvalid("batch is exist: empty batch or NULL array")
		}
		oks, err := s.batchExist(cStrings(keys, int(n)))
		if err != nil {
			return 0, err
		}
		rs := i64s(out, int(n))
		for i := range rs {
			rs[i] = 0
			if i < len(oks) && oks[i] {
				rs[i] = 1
			}
		}
		return 0, nil
	})
}

//export mc_store_get_size
func mc_store_get_size(h C.int64_t, key *C.char) C.int64_t {
	return withStore(h, "get size", func(s *storeState) (int64, error) {
		return s.size(goString(key))
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

//export mc_store_remove
func mc_store_remove(h C.int64_t, key *C.char, force C.int64_t) C.int64_t {
	return withStore(h, "remove", func(s *storeState) (int64, error) {
		return 0, s.remove(goString(key), force != 0)
	})
}

//export mc_store_remove_regex
func mc_store_remove_regex(h C.int64_t, pattern *C.char, force C.int64_t) C.int64_t {
	return withStore(h, "remove by regex", func(s *storeState) (int64, error) {
		n, err := s.removeRegex(goString(pattern), force != 0)
		return int64(n), err
	})
}

//export mc_store_remove_all
func mc_store_remove_all(h C.int64_t, force C.int64_t) C.int64_t {
	return withStore(h, "remove all", func(s *storeState) (int64, error) {
		n, err := s.removeAll(force != 0)
		return int64(n), err
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

//export mc_store_list
func mc_store_list(h C.int64_t, prefix *C.char, out *unsafe.Pointer) C.int64_t {
	return storeBytes(h, "list", out, func(s *storeState) ([]byte, error) {
		return s.list(goString(prefix))
	})
}
