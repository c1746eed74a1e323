package main

import (
	"unsafe"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// Store calls with device buffers (put_from, get_into, their batch forms
// and the tensor calls built on them): a device value is copied to host
// memory with the driver and put from there; a get into device memory
// reads (and verifies) into host memory and is copied to the device. Both
// work for real and dummy clients. register_buffer of device memory only
// records the range: the store never hands device memory to its engine.

// devicePut is put for a value in device memory; ok is false for host memory.
func (s *storeState) devicePut(key string, value []byte, o store.PutOptions) (ok bool, err error) {
	if len(value) == 0 {
		return false, nil
	}
	addr := uint64(transfer.AddrOf(value))
	ord, isDev := deviceOrdinal(addr)
	if !isDev {
		return false, nil
	}
	host := make([]byte, len(value))
	if err := gpuDriver().CopyToHost(ord, host, uintptr(addr)); err != nil {
		return true, err
	}
	return true, s.put(key, host, o)
}

// deviceGetInto is getInto for a destination in device memory.
func (s *storeState) deviceGetInto(key string, dst []byte) (n int, ok bool, err error) {
	if len(dst) == 0 {
		return 0, false, nil
	}
	addr := uint64(transfer.AddrOf(dst))
	ord, isDev := deviceOrdinal(addr)
	if !isDev {
		return 0, false, nil
	}
	host := make([]byte, len(dst))
	n, err = s.getInto(key, host)
	if err != nil {
		return 0, true, err
	}
	if n > 0 {
		err = gpuDriver().CopyFromHost(ord, uintptr(addr), host[:n])
	}
	return n, true, err
}

// anyDevice reports whether any of ptrs is device memory (the batch fast
// paths then step aside for the per-key calls, which handle it).
func anyDevice(ptrs []unsafe.Pointer) bool {
	if gpuDriver() == nil {
		return false
	}
	for _, p := range ptrs {
		if _, ok := deviceOrdinal(uint64(uintptr(p))); ok {
			return true
		}
	}
	return false
}
