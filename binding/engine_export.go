package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"time"
	"unsafe"
)

// This file holds the thin cgo wrappers of the transfer engine; the logic is
// in engine.go. Every wrapper runs under guard (no panic crosses the ABI).

//export mc_engine_open
func mc_engine_open(host, metadata, protocol, device *C.char) C.int64_t {
	return C.int64_t(guard("engine open", func() (int64, error) {
		cfg, warns, err := engineArgs(goString(host), goString(metadata), goString(protocol), goString(device))
		if err != nil {
			return 0, err
		}
		for _, w := range warns {
			logger.Warn("engine open", "note", w)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := openEngine(ctx, cfg)
		if err != nil {
			return 0, err
		}
		return engines.add(s), nil
	}))
}

//export mc_engine_close
func mc_engine_close(h C.int64_t) C.int64_t {
	return closeHandle(engines, h, "engine")
}

//export mc_engine_rpc_port
func mc_engine_rpc_port(h C.int64_t) C.int64_t {
	return withEngine(h, "engine rpc port", func(s *engineState) (int64, error) {
		return int64(s.e.RPCPort()), nil
	})
}

//export mc_engine_name
func mc_engine_name(h C.int64_t, buf *C.char, capacity C.int64_t) C.int64_t {
	return withEngine(h, "engine name", func(s *engineState) (int64, error) {
		name := s.e.Name()
		if buf == nil || int(capacity) < len(name)+1 {
			return 0, errInvalid("name buffer too small")
		}
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity))
		copy(dst, name)
		dst[len(name)] = 0
		return int64(len(name)), nil
	})
}

//export mc_engine_register
func mc_engine_register(h C.int64_t, addr, length C.uint64_t, location *C.char) C.int64_t {
	return withEngine(h, "register memory", func(s *engineState) (int64, error) {
		return 0, s.register(uint64(addr), uint64(length), goString(location))
	})
}

//export mc_engine_unregister
func mc_engine_unregister(h C.int64_t, addr C.uint64_t) C.int64_t {
	return withEngine(h, "unregister memory", func(s *engineState) (int64, error) {
		return 0, s.unregister(uint64(addr))
	})
}

//export mc_engine_alloc_managed
func mc_engine_alloc_managed(h C.int64_t, length C.uint64_t) C.uint64_t {
	return engineAddr(h, "allocate managed buffer", func(s *engineState) (uint64, error) {
		return s.allocManaged(uint64(length))
	})
}

//export mc_engine_free_managed
func mc_engine_free_managed(h C.int64_t, addr C.uint64_t) C.int64_t {
	return withEngine(h, "free managed buffer", func(s *engineState) (int64, error) {
		return 0, s.freeManaged(uint64(addr))
	})
}

//export mc_engine_transfer
func mc_engine_transfer(h C.int64_t, target *C.char, op, n C.int64_t, locals, remotes, lens *C.uint64_t) C.int64_t {
	rc := withEngine(h, "transfer", func(s *engineState) (int64, error) {
		k := int(n)
		return 0, s.transfer(goString(target), int64(op), u64s(locals, k), u64s(remotes, k), u64s(lens, k))
	})
	if rc < 0 {
		return -1 // Mooncake's sync transfers return 0 or -1
	}
	return 0
}

//export mc_engine_submit
func mc_engine_submit(h C.int64_t, target *C.char, op, n C.int64_t, locals, remotes, lens *C.uint64_t) C.int64_t {
	return withEngine(h, "submit", func(s *engineState) (int64, error) {
		k := int(n)
		return s.submit(goString(target), int64(op), u64s(locals, k), u64s(remotes, k), u64s(lens, k))
	})
}

//export mc_batch_wait
func mc_batch_wait(h, n C.int64_t, ids *C.int64_t) C.int64_t {
	rc := withEngine(h, "batch wait", func(s *engineState) (int64, error) {
		if n <= 0 || ids == nil {
			return 0, errInvalid("no batch ids")
		}
		return 0, s.wait(append([]int64(nil), i64s(ids, int(n))...))
	})
	if rc < 0 {
		return -1
	}
	return 0
}

//export mc_batch_check
func mc_batch_check(h, id C.int64_t) C.int64_t {
	var state int64 = codeCheckFailed
	withEngine(h, "transfer check status", func(s *engineState) (int64, error) {
		var err error
		state, err = s.check(int64(id), time.Now())
		return 0, err
	})
	return C.int64_t(state)
}

//export mc_engine_probe
func mc_engine_probe(h C.int64_t, peer *C.char) C.int64_t {
	rc := withEngine(h, "probe", func(s *engineState) (int64, error) {
		return 0, s.probe(goString(peer))
	})
	if rc < 0 {
		return -1
	}
	return 0
}

//export mc_engine_first_buffer
func mc_engine_first_buffer(h C.int64_t, segment *C.char) C.uint64_t {
	return engineAddr(h, "first buffer address", func(s *engineState) (uint64, error) {
		return s.firstBuffer(goString(segment))
	})
}

//export mc_engine_notify
func mc_engine_notify(h C.int64_t, peer, name *C.char, msg unsafe.Pointer, n C.int64_t) C.int64_t {
	return withEngine(h, "notify", func(s *engineState) (int64, error) {
		if n < 0 || (n > 0 && msg == nil) || n > 1<<20 {
			return 0, errInvalid("bad notification message")
		}
		var b []byte
		if n > 0 {
			b = C.GoBytes(msg, C.int(n))
		}
		return 0, s.notify(goString(peer), goString(name), b)
	})
}

//export mc_engine_notifies
func mc_engine_notifies(h C.int64_t, out *unsafe.Pointer) C.int64_t {
	return engineBytes(h, "get notifies", out, func(s *engineState) ([]byte, error) {
		return s.notifiesJSON()
	})
}

//export mc_engine_topology
func mc_engine_topology(h C.int64_t, out *unsafe.Pointer) C.int64_t {
	return engineBytes(h, "local topology", out, func(s *engineState) ([]byte, error) {
		return s.topologyJSON()
	})
}
