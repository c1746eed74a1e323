package main

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

func TestNestedMover(t *testing.T) {
	e, err := transfer.Open(t.Context(), transfer.Config{Transport: transfer.TransportInproc, InprocHub: inprocHub})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m := newNestedMover(e)
	buf := make([]byte, 1<<20)
	if err := m.RegisterBytes(buf, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	inner := buf[4096:8192:8192]
	for range 2 {
		if err := m.RegisterBytes(inner, "cpu:0"); err != nil {
			t.Fatalf("nested register: %v", err)
		}
	}
	if n := len(e.Buffers()); n != 1 {
		t.Fatalf("engine has %d buffers, want 1", n)
	}
	for range 2 {
		if err := m.Unregister(transfer.AddrOf(inner)); err != nil {
			t.Fatalf("nested unregister: %v", err)
		}
	}
	if err := m.Unregister(transfer.AddrOf(inner)); err == nil {
		t.Fatal("a third unregister of the nested range must reach the engine and fail")
	}
	if err := m.Unregister(transfer.AddrOf(buf)); err != nil {
		t.Fatal(err)
	}
	if n := len(e.Buffers()); n != 0 {
		t.Fatalf("engine has %d buffers, want 0", n)
	}
	// after the outer range is gone, the inner one is registered for real
	if err := m.RegisterBytes(inner, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.Buffers()); n != 1 {
		t.Fatalf("engine has %d buffers, want 1", n)
	}
}

// TestBatchPutAndGetOfRegisteredBuffers runs batch put and get through the
// batched calls (values inside register_buffer memory) and checks the data
// and Mooncake's put semantics.
func TestBatchPutAndGetOfRegisteredBuffers(t *testing.T) {
	s := inProcessStore(t)
	const n, size = 4, 256 << 10
	src, dst := make([]byte, n*size), make([]byte, n*size)
	registerPattern(t, s, 13, src, dst)
	keys := []string{"b0", "b1", "b2", "b3"}
	ps, ds, sizes := make([]unsafe.Pointer, n), make([]unsafe.Pointer, n), make([]uint64, n)
	for i := range n {
		ps[i], ds[i], sizes[i] = unsafe.Pointer(&src[i*size]), unsafe.Pointer(&dst[i*size]), size
	}
	errs, ok := s.batchPut(keys, ps, sizes, store.PutOptions{})
	if !ok {
		t.Fatal("batchPut did not take the batched path")
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	if errs, _ := s.batchPut(keys, ps, sizes, store.PutOptions{}); errs[0] != nil {
		t.Fatalf("a put of existing keys must succeed: %v", errs[0])
	}
	ns, gerrs, ok := s.batchGetInto(keys, ds, sizes)
	if !ok {
		t.Fatal("batchGetInto did not take the batched path")
	}
	for i := range n {
		if gerrs[i] != nil || ns[i] != size {
			t.Fatalf("get %s: %d %v", keys[i], ns[i], gerrs[i])
		}
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("data differs")
	}
	// unregistered memory is not taken by the batched paths
	if _, ok := s.batchPut(keys[:2], []unsafe.Pointer{unsafe.Pointer(&make([]byte, 8)[0]), ps[1]}, []uint64{8, size}, store.PutOptions{}); ok {
		t.Fatal("batchPut took unregistered memory")
	}
}
