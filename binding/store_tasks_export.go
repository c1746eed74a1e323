package main

/*
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/kvcache-go/mooncake/store"
)

// Thin cgo wrappers of store_tasks.go. Every wrapper runs under guard.

// mc_store_replica_clear clears the replicas of n keys (all of them with
// segment "", else those on that segment) and hands the keys cleared (a
// JSON array) through out. The length, or a negative code.
//
//export mc_store_replica_clear
func mc_store_replica_clear(h, n C.int64_t, keys **C.char, segment *C.char, out *unsafe.Pointer) C.int64_t {
	return storeBytes(h, "batch replica clear", out, func(s *storeState) ([]byte, error) {
		if n < 0 || (n > 0 && keys == nil) {
			return nil, errInvalid("batch replica clear: bad key array")
		}
		return s.replicaClear(cStrings(keys, int(n)), goString(segment))
	})
}

// setTaskID writes id into the two uint64s at p.
func setTaskID(p *C.uint64_t, id store.TaskID) error {
	if p == nil {
		return errInvalid("NULL task id")
	}
	out := u64s(p, 2)
	out[0], out[1] = id.Hi, id.Lo
	return nil
}

// mc_store_create_copy_task asks for a copy of key on n target segments;
// the task id goes to id[0], id[1]. 0 or a negative code.
//
//export mc_store_create_copy_task
func mc_store_create_copy_task(h C.int64_t, key *C.char, n C.int64_t, targets **C.char, id *C.uint64_t) C.int64_t {
	return withStore(h, "create copy task", func(s *storeState) (int64, error) {
		if n < 0 || (n > 0 && targets == nil) || id == nil {
			return 0, errInvalid("create copy task: bad target array or NULL id")
		}
		tid, err := s.createCopyTask(goString(key), cStrings(targets, int(n)))
		if err != nil {
			return 0, err
		}
		return 0, setTaskID(id, tid)
	})
}

// mc_store_create_move_task asks for key's replica on source to move to
// target; the task id goes to id[0], id[1]. 0 or a negative code.
//
//export mc_store_create_move_task
func mc_store_create_move_task(h C.int64_t, key, source, target *C.char, id *C.uint64_t) C.int64_t {
	return withStore(h, "create move task", func(s *storeState) (int64, error) {
		if id == nil {
			return 0, errInvalid("create move task: NULL id")
		}
		tid, err := s.createMoveTask(goString(key), goString(source), goString(target))
		if err != nil {
			return 0, err
		}
		return 0, setTaskID(id, tid)
	})
}

// mc_store_query_task hands the task's state (JSON, see taskJSON) through
// out. The length, or a negative code (-1400 for an unknown task).
//
//export mc_store_query_task
func mc_store_query_task(h C.int64_t, hi, lo C.uint64_t, out *unsafe.Pointer) C.int64_t {
	return storeBytes(h, "query task", out, func(s *storeState) ([]byte, error) {
		return s.queryTask(store.TaskID{Hi: uint64(hi), Lo: uint64(lo)})
	})
}
