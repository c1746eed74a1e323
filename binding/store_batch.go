package main

import (
	"context"
	"errors"
	"sync"
	"unsafe"

	"github.com/kvcache-go/mooncake/store"
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
	if !has || len(keys) < batchGetMin || anyDevice(ptrs) {
		return nil, nil, false
	}
	dsts := make([][]byte, len(keys))
	for i := range keys {
		if keys[i] == "" || ptrs[i] == nil || sizes[i] == 0 || sizes[i] > 1<<40 ||
			!s.regs.contains(uint64(uintptr(ptrs[i])), sizes[i]) {
			return nil, nil, false
		}
		dsts[i] = unsafe.Slice((*byte)(ptrs[i]), int(sizes[i]))
	}
	ctx, cancel := s.ctx(0)
	defer cancel()
	ns, errs = bg.BatchGetInto(ctx, keys, dsts)
	return ns, errs, true
}

// nestedMover is the store client's transfer engine, except that
// registering memory that lies inside a range it already registered
// succeeds without asking the engine (which refuses overlaps): the store's
// batched put registers each value it sends in place, and values inside a
// buffer from register_buffer are sent from there instead of being copied
// into a staging slab. Unregistering such a nested range is a no-op.
type nestedMover struct {
	*transfer.Engine

	mu     sync.Mutex
	top    regions         // ranges registered with the engine through this mover
	nested map[uintptr]int // nested registrations by address (a count)
}

func newNestedMover(e *transfer.Engine) *nestedMover {
	return &nestedMover{Engine: e, nested: map[uintptr]int{}}
}

// RegisterBytes registers b, or notes it when it lies in a registered range.
func (m *nestedMover) RegisterBytes(b []byte, location string) error {
	a := transfer.AddrOf(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(b) > 0 && m.top.contains(uint64(a), uint64(len(b))) {
		m.nested[a]++
		return nil
	}
	if err := m.Engine.RegisterBytes(b, location); err != nil {
		return err
	}
	if len(b) > 0 {
		_ = m.top.add(uint64(a), uint64(len(b)))
	}
	return nil
}

// Unregister undoes RegisterBytes.
func (m *nestedMover) Unregister(addr uintptr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.nested[addr]; n > 0 {
		if n == 1 {
			delete(m.nested, addr)
		} else {
			m.nested[addr] = n - 1
		}
		return nil
	}
	m.top.remove(uint64(addr))
	return m.Engine.Unregister(addr)
}

// batchPutter is a store client with a batched put (one master call to
// allocate every key, one transfer batch, one call to commit).
type batchPutter interface {
	BatchPut(ctx context.Context, keys []string, values [][]byte, o store.PutOptions) []error
}

// batchPutMin is the batch size from which batchPut uses the batched put.
const batchPutMin = 2

// batchPut puts a batch with the client's batched put when it has one,
// the batch is large enough and every value lies in memory registered with
// register_buffer (sent in place, see nestedMover); ok is false when the
// caller should put key by key instead. As with put, a plain put of a key that
// exists succeeds.
func (s *storeState) batchPut(keys []string, ptrs []unsafe.Pointer, sizes []uint64, o store.PutOptions) (errs []error, ok bool) {
	bp, has := s.c.(batchPutter)
	if !has || len(keys) < batchPutMin || anyDevice(ptrs) {
		return nil, false
	}
	values := make([][]byte, len(keys))
	for i := range keys {
		if keys[i] == "" || ptrs[i] == nil || sizes[i] == 0 || sizes[i] > 1<<40 ||
			!s.regs.contains(uint64(uintptr(ptrs[i])), sizes[i]) {
			return nil, false
		}
		values[i] = unsafe.Slice((*byte)(ptrs[i]), int(sizes[i]))
	}
	ctx, cancel := s.ctx(0)
	defer cancel()
	errs = bp.BatchPut(ctx, keys, values, o)
	for i, err := range errs {
		if !o.Upsert && errors.Is(err, store.ErrExists) {
			errs[i] = nil
		}
	}
	return errs, true
}
