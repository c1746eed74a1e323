package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DefaultLibrary is the driver's soname.
const DefaultLibrary = "libcuda.so.1"

// Errors callers branch on.
var (
	// ErrNoDriver: the driver library could not be loaded or initialised
	// (no NVIDIA driver on this host, or no device).
	ErrNoDriver = errors.New("cuda: no usable CUDA driver")
	// ErrInvalid: a bad argument (a nil pointer, a negative size, an
	// out-of-range device).
	ErrInvalid = errors.New("cuda: invalid argument")
)

// Error is a CUresult other than CUDA_SUCCESS from a named driver call.
type Error struct {
	Func string
	Code int32
}

func (e *Error) Error() string { return fmt.Sprintf("cuda: %s failed: CUresult %d", e.Func, e.Code) }

// Driver attribute and memory-type values (cuda.h).
const (
	attrMemoryType    = 2 // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
	attrDeviceOrdinal = 9 // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
	memoryTypeHost    = 1 // CU_MEMORYTYPE_HOST
	memoryTypeDevice  = 2 // CU_MEMORYTYPE_DEVICE
	hostAllocPortable = 1 // CU_MEMHOSTALLOC_PORTABLE
)

// Driver is a loaded, initialised CUDA driver. Safe for concurrent use.
type Driver struct {
	lib uintptr

	cuInit                    func(flags uint32) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuPointerGetAttribute     func(data unsafe.Pointer, attr int32, ptr uint64) int32
	cuMemAlloc                func(ptr *uint64, size uint64) int32
	cuMemFree                 func(ptr uint64) int32
	cuMemHostAlloc            func(pp *unsafe.Pointer, size uint64, flags uint32) int32
	cuMemFreeHost             func(p unsafe.Pointer) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, n uint64) int32
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, n uint64) int32
	cuMemcpyDtoD              func(dst, src uint64, n uint64) int32
	cuMemcpyPeer              func(dst uint64, dstCtx uintptr, src uint64, srcCtx uintptr, n uint64) int32
	cuMemGetAddressRange      func(base *uint64, size *uint64, p uint64) int32
	cuIpcGetMemHandle         func(h *IPCHandle, p uint64) int32
	cuIpcOpenMemHandle        func(p *uint64, h IPCHandle, flags uint32) int32
	cuIpcCloseMemHandle       func(p uint64) int32
	cuStreamSynchronize       func(stream uintptr) int32

	mu   sync.Mutex
	ctxs map[int]uintptr // device ordinal -> retained primary context
}

// Load opens the driver library at path (DefaultLibrary when empty),
// resolves the entry points and initialises the driver. Any failure wraps
// ErrNoDriver: a host without a GPU gets that, never a crash.
func Load(path string) (d *Driver, err error) {
	if path == "" {
		path = DefaultLibrary
	}
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	d = &Driver{lib: lib, ctxs: map[int]uintptr{}}
	defer func() {
		if err != nil {
			purego.Dlclose(lib)
		}
	}()
	syms := []struct {
		fn   any
		name string
	}{
		{&d.cuInit, "cuInit"},
		{&d.cuDeviceGetCount, "cuDeviceGetCount"},
		{&d.cuDeviceGet, "cuDeviceGet"},
		{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&d.cuPointerGetAttribute, "cuPointerGetAttribute"},
		{&d.cuMemAlloc, "cuMemAlloc_v2"},
		{&d.cuMemFree, "cuMemFree_v2"},
		{&d.cuMemHostAlloc, "cuMemHostAlloc"},
		{&d.cuMemFreeHost, "cuMemFreeHost"},
		{&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"},
		{&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
		{&d.cuMemcpyDtoD, "cuMemcpyDtoD_v2"},
		{&d.cuMemcpyPeer, "cuMemcpyPeer"},
		{&d.cuMemGetAddressRange, "cuMemGetAddressRange_v2"},
		{&d.cuIpcGetMemHandle, "cuIpcGetMemHandle"},
		{&d.cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2"},
		{&d.cuIpcCloseMemHandle, "cuIpcCloseMemHandle"},
		{&d.cuStreamSynchronize, "cuStreamSynchronize"},
	}
	for _, s := range syms {
		if _, err := purego.Dlsym(lib, s.name); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNoDriver, s.name, err)
		}
		purego.RegisterLibFunc(s.fn, lib, s.name)
	}
	if r := d.cuInit(0); r != 0 {
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, &Error{"cuInit", r})
	}
	return d, nil
}

// Close releases the primary contexts this driver retained and closes the
// library. Memory allocated through it must be freed before.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for dev := range d.ctxs {
		d.cuDevicePrimaryCtxRelease(int32(dev))
	}
	d.ctxs = map[int]uintptr{}
	return purego.Dlclose(d.lib)
}

// DeviceCount returns the number of CUDA devices.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if r := d.cuDeviceGetCount(&n); r != 0 {
		return 0, &Error{"cuDeviceGetCount", r}
	}
	return int(n), nil
}

// context returns device dev's primary context, retaining it once.
func (d *Driver) context(dev int) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.ctxs[dev]; ok {
		return c, nil
	}
	n, err := d.DeviceCount()
	if err != nil {
		return 0, err
	}
	if dev < 0 || dev >= n {
		return 0, fmt.Errorf("%w: device %d of %d", ErrInvalid, dev, n)
	}
	var h int32
	if r := d.cuDeviceGet(&h, int32(dev)); r != 0 {
		return 0, &Error{"cuDeviceGet", r}
	}
	var c uintptr
	if r := d.cuDevicePrimaryCtxRetain(&c, h); r != 0 {
		return 0, &Error{"cuDevicePrimaryCtxRetain", r}
	}
	d.ctxs[dev] = c
	return c, nil
}

// on runs f on a locked OS thread with device dev's primary context
// current: the driver's context is per thread, goroutines are not.
func (d *Driver) on(dev int, f func() int32, name string) error {
	c, err := d.context(dev)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := d.cuCtxSetCurrent(c); r != 0 {
		return &Error{"cuCtxSetCurrent", r}
	}
	if r := f(); r != 0 {
		return &Error{name, r}
	}
	return nil
}

// PointerInfo tells whether p is device memory and, if so, the device's
// ordinal. Host memory (pageable or pinned) and addresses the driver does
// not know are reported as not device memory.
func (d *Driver) PointerInfo(p uintptr) (device bool, ordinal int, err error) {
	if p == 0 {
		return false, 0, fmt.Errorf("%w: nil pointer", ErrInvalid)
	}
	var mt uint32
	// CUDA_ERROR_INVALID_VALUE (1): an address the driver never saw, that
	// is ordinary host memory.
	if r := d.cuPointerGetAttribute(unsafe.Pointer(&mt), attrMemoryType, uint64(p)); r != 0 || mt != memoryTypeDevice {
		return false, 0, nil
	}
	var ord int32
	if r := d.cuPointerGetAttribute(unsafe.Pointer(&ord), attrDeviceOrdinal, uint64(p)); r != 0 {
		return true, 0, &Error{"cuPointerGetAttribute", r}
	}
	return true, int(ord), nil
}

// MemAlloc allocates n bytes of device memory on dev.
func (d *Driver) MemAlloc(dev, n int) (uintptr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("%w: size %d", ErrInvalid, n)
	}
	var p uint64
	err := d.on(dev, func() int32 { return d.cuMemAlloc(&p, uint64(n)) }, "cuMemAlloc")
	return uintptr(p), err
}

// MemFree frees device memory from MemAlloc.
func (d *Driver) MemFree(dev int, p uintptr) error {
	return d.on(dev, func() int32 { return d.cuMemFree(uint64(p)) }, "cuMemFree")
}

// HostAlloc allocates n bytes of pinned (page-locked) host memory, usable
// by every context, as a Go slice over that memory. Free it with HostFree.
func (d *Driver) HostAlloc(dev, n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: size %d", ErrInvalid, n)
	}
	var p unsafe.Pointer
	if err := d.on(dev, func() int32 { return d.cuMemHostAlloc(&p, uint64(n), hostAllocPortable) }, "cuMemHostAlloc"); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// HostFree frees pinned memory from HostAlloc.
func (d *Driver) HostFree(dev int, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return d.on(dev, func() int32 { return d.cuMemFreeHost(unsafe.Pointer(unsafe.SliceData(b))) }, "cuMemFreeHost")
}

// CopyToHost copies len(dst) bytes from device address src (on dev) into dst.
func (d *Driver) CopyToHost(dev int, dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return d.on(dev, func() int32 {
		return d.cuMemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), uint64(src), uint64(len(dst)))
	}, "cuMemcpyDtoH")
}

// CopyFromHost copies src into device address dst (on dev).
func (d *Driver) CopyFromHost(dev int, dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.on(dev, func() int32 {
		return d.cuMemcpyHtoD(uint64(dst), unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src)))
	}, "cuMemcpyHtoD")
}

// CopyDevice copies n bytes from device address src (on device srcDev) to
// device address dst (on device dstDev) without a host round trip:
// cuMemcpyDtoD within one device, cuMemcpyPeer between two.
func (d *Driver) CopyDevice(dstDev int, dst uintptr, srcDev int, src uintptr, n int) error {
	if n <= 0 {
		return nil
	}
	if dstDev == srcDev {
		return d.on(dstDev, func() int32 { return d.cuMemcpyDtoD(uint64(dst), uint64(src), uint64(n)) }, "cuMemcpyDtoD")
	}
	dc, err := d.context(dstDev)
	if err != nil {
		return err
	}
	sc, err := d.context(srcDev)
	if err != nil {
		return err
	}
	return d.on(dstDev, func() int32 { return d.cuMemcpyPeer(uint64(dst), dc, uint64(src), sc, uint64(n)) }, "cuMemcpyPeer")
}

// AddressRange returns the allocation that holds device address p: its
// base and size (cuMemGetAddressRange).
func (d *Driver) AddressRange(dev int, p uintptr) (base uintptr, size int, err error) {
	var b, n uint64
	err = d.on(dev, func() int32 { return d.cuMemGetAddressRange(&b, &n, uint64(p)) }, "cuMemGetAddressRange")
	return uintptr(b), int(n), err
}

// IPCHandle names a device allocation to other processes of the host
// (CUipcMemHandle).
type IPCHandle struct{ Reserved [64]byte }

// ipcLazyEnablePeerAccess is CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.
const ipcLazyEnablePeerAccess = 1

// IPCHandleOf returns the handle of the allocation whose base is p (see
// AddressRange), for another process to open with IPCOpen.
func (d *Driver) IPCHandleOf(dev int, p uintptr) (IPCHandle, error) {
	var h IPCHandle
	err := d.on(dev, func() int32 { return d.cuIpcGetMemHandle(&h, uint64(p)) }, "cuIpcGetMemHandle")
	return h, err
}

// IPCOpen maps another process's allocation into this one, on device dev,
// and returns its base here. Close it with IPCClose. A process cannot open
// its own handles (the driver refuses).
func (d *Driver) IPCOpen(dev int, h IPCHandle) (uintptr, error) {
	var p uint64
	err := d.on(dev, func() int32 { return d.cuIpcOpenMemHandle(&p, h, ipcLazyEnablePeerAccess) }, "cuIpcOpenMemHandle")
	return uintptr(p), err
}

// IPCClose unmaps an allocation opened with IPCOpen.
func (d *Driver) IPCClose(dev int, p uintptr) error {
	return d.on(dev, func() int32 { return d.cuIpcCloseMemHandle(uint64(p)) }, "cuIpcCloseMemHandle")
}

// HostAddr is the address of b's first byte (0 when empty), for telling
// host memory from device memory in tests and callers.
func HostAddr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// StreamSynchronize waits until every operation queued on stream (a
// CUstream / cudaStream_t; 0 is the default stream) of device dev ended.
func (d *Driver) StreamSynchronize(dev int, stream uintptr) error {
	return d.on(dev, func() int32 { return d.cuStreamSynchronize(stream) }, "cuStreamSynchronize")
}

// Present reports whether the driver library at path ("": DefaultLibrary)
// can be opened and exports cuInit, without initialising the driver: a
// process that checks it may still fork children that use CUDA (CUDA
// cannot be used in a child forked after cuInit).
func Present(path string) bool {
	if path == "" {
		path = DefaultLibrary
	}
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return false
	}
	defer purego.Dlclose(lib)
	_, err = purego.Dlsym(lib, "cuInit")
	return err == nil
}
