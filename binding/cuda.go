package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/kvcache-go/mooncake/internal/cuda"
	"github.com/kvcache-go/mooncake/internal/transport/registry"
)

// The binding's GPU support: the CUDA driver, loaded once per process from
// $MOONCAKE_CUDA_LIB (a path; the simulated driver in tests) or
// libcuda.so.1. Without a driver or a device everything behaves as on a CPU
// host and SUPPORT_CUDA is False. With one, engines and store clients copy
// device memory with it: the binding never dereferences a device address.
var gpu struct {
	once sync.Once
	d    *cuda.Driver
	err  error
}

// gpuDriver returns the driver, or nil when there is no usable device.
func gpuDriver() *cuda.Driver {
	gpu.once.Do(func() {
		d, err := cuda.Load(os.Getenv("MOONCAKE_CUDA_LIB"))
		if err != nil {
			gpu.err = err
			return
		}
		if n, err := d.DeviceCount(); err != nil || n == 0 {
			gpu.err = fmt.Errorf("%w: no CUDA device (%v)", cuda.ErrNoDriver, err)
			_ = d.Close()
			return
		}
		gpu.d = d
	})
	return gpu.d
}

// deviceOrdinal reports whether addr is device memory, and of which device.
func deviceOrdinal(addr uint64) (int, bool) {
	d := gpuDriver()
	if d == nil || addr == 0 {
		return 0, false
	}
	isDev, ord, err := d.PointerInfo(uintptr(addr))
	return ord, err == nil && isDev
}

// gpuCopy copies n bytes from src to dst, each host or device memory.
func gpuCopy(dst, src, n uint64) error {
	d := gpuDriver()
	if d == nil {
		return errInvalid("no CUDA device")
	}
	if dst == 0 || src == 0 || n == 0 || n > 1<<40 {
		return errInvalid(fmt.Sprintf("copy 0x%x <- 0x%x +%d", dst, src, n))
	}
	dOrd, dDev := deviceOrdinal(dst)
	sOrd, sDev := deviceOrdinal(src)
	switch {
	case dDev && sDev:
		return d.CopyDevice(dOrd, uintptr(dst), sOrd, uintptr(src), int(n))
	case dDev:
		return d.CopyFromHost(dOrd, uintptr(dst), rawBytes(src, n))
	case sDev:
		return d.CopyToHost(sOrd, rawBytes(dst, n), uintptr(src))
	}
	copy(rawBytes(dst, n), rawBytes(src, n))
	return nil
}

// mc_cuda_supported is SUPPORT_CUDA: 1 when a CUDA device is usable. It
// is asked at import time, so it does not initialise CUDA (a process that
// did could not fork children that use CUDA, as vLLM's do): the driver
// library must load and an NVIDIA device must be listed (/dev/nvidiaN or
// /proc/driver/nvidia/gpus). With
// $MOONCAKE_CUDA_LIB set (a simulated or chosen driver) that driver is
// loaded and asked for its devices.
//
//export mc_cuda_supported
func mc_cuda_supported() C.int64_t {
	if os.Getenv("MOONCAKE_CUDA_LIB") != "" {
		if gpuDriver() != nil {
			return 1
		}
		return 0
	}
	devs, _ := filepath.Glob("/dev/nvidia[0-9]*")
	gpus, _ := filepath.Glob("/proc/driver/nvidia/gpus/*")
	if len(devs)+len(gpus) > 0 && cuda.Present("") {
		return 1
	}
	return 0
}

// mc_cuda_device returns the device ordinal of addr, or -1 for host memory.
//
//export mc_cuda_device
func mc_cuda_device(addr C.uint64_t) C.int64_t {
	if ord, ok := deviceOrdinal(uint64(addr)); ok {
		return C.int64_t(ord)
	}
	return -1
}

// mc_cuda_memcpy copies n bytes from src to dst, each host or device memory.
//
//export mc_cuda_memcpy
func mc_cuda_memcpy(dst, src, n C.uint64_t) C.int64_t {
	return C.int64_t(guard("cuda memcpy", func() (int64, error) { return 0, gpuCopy(uint64(dst), uint64(src), uint64(n)) }))
}

// mc_cuda_stream_sync waits for the work queued on stream (a cudaStream_t;
// 0: the default stream) of device dev.
//
//export mc_cuda_stream_sync
func mc_cuda_stream_sync(dev C.int64_t, stream C.uint64_t) C.int64_t {
	return C.int64_t(guard("cuda stream sync", func() (int64, error) {
		d := gpuDriver()
		if d == nil {
			return 0, errInvalid("no CUDA device")
		}
		return 0, d.StreamSynchronize(int(dev), uintptr(stream))
	}))
}

// mc_cuda_alloc allocates n bytes of device memory on dev (tests and
// benchmarks without torch); 0 on failure.
//
//export mc_cuda_alloc
func mc_cuda_alloc(dev C.int64_t, n C.uint64_t) C.uint64_t {
	var p uintptr
	guard("cuda alloc", func() (int64, error) {
		d := gpuDriver()
		if d == nil {
			return 0, errInvalid("no CUDA device")
		}
		var err error
		p, err = d.MemAlloc(int(dev), int(n))
		return 0, err
	})
	return C.uint64_t(p)
}

// mc_cuda_free frees device memory from mc_cuda_alloc.
//
//export mc_cuda_free
func mc_cuda_free(dev C.int64_t, p C.uint64_t) C.int64_t {
	return C.int64_t(guard("cuda free", func() (int64, error) {
		d := gpuDriver()
		if d == nil {
			return 0, errInvalid("no CUDA device")
		}
		return 0, d.MemFree(int(dev), uintptr(p))
	}))
}

// rawBytes views host memory at addr (never device memory).
func rawBytes(addr, n uint64) []byte { return registry.RawBytes(uintptr(addr), int(n)) }
