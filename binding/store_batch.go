package main

import (
	"context"
	"unsafe"

	"github.com/kvcache-go/mooncake/transfer"
)

// batchGetter is a store client with a batched read: one master call for
// every key's replicas and one transfer batch into registered buffers.
type batchGetter interface {
	BatchGetInto(ctx context.Context, keys []string, dsts [][]byte) ([]int, []error)
}

// batchGetMin is the batch size from which batchGetInto uses the batched read.
const batchGetMin = 2

// batchGetInto reads a batch with the client's batched read when it has one,
// the batch is large enough and every destination lies in memory registered
// with register_buffer (the batched read fills it in place); ok is false
// when the caller should read key by key instead. ns gets the lengths, errs
// the errors.
func (s *storeState) batchGetInto(keys []string, ptrs []unsafe.Pointer, sizes []uint64) (ns []int, errs []error, ok bool) {
	bg, has := s.c.(batchGetter)
	if !has || len(keys) < batchGetMin {
		return nil, nil, false
	}
	dsts := make([][]byte, len(keys))
	for i := range keys {
		if keys[i] == "" || ptrs[i] == nil || sizes[i] == 0 || sizes[i] > 1<<40 ||
			!s.regs.contains(uint64(uintptr(ptrs[i])), sizes[i]) {
			return nil, nil, false
		}
		dsts[i] = unsafe.Slice((*byte)(ptrs[i]), int(sizes[i]))
		_ = transfer.AddrOf(dsts[i])
	}
	ctx, cancel := s.ctx(0)
	defer cancel()
	ns, errs = bg.BatchGetInto(ctx, keys, dsts)
	return ns, errs, true
}
