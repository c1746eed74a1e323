// Package cuda reaches NVIDIA GPUs through the CUDA driver API
// (libcuda.so.1), loaded at run time with a pure-Go dlopen
// (github.com/ebitengine/purego): no CUDA toolkit to build, no cgo, and a
// binary that runs unchanged on hosts without a GPU.
//
// # What it offers
//
//   - Load opens the driver (ErrNoDriver when it is absent: the normal case
//     on a CPU host) and initialises it; DeviceCount, PointerInfo (is an
//     address device memory, and of which device: cuPointerGetAttribute),
//     MemAlloc/MemFree (device memory, for tests and benchmarks),
//     HostAlloc/HostFree (pinned host memory: cuMemHostAlloc), and
//     synchronous copies between device and host (cuMemcpyDtoH/HtoD), device
//     to device (CopyDevice: cuMemcpyDtoD, cuMemcpyPeer between devices),
//     AddressRange (the allocation holding an address), CUDA IPC handles
//     (IPCHandleOf, IPCOpen, IPCClose: another process of the host maps an
//     allocation) and StreamSynchronize.
//     Every call makes the device's primary context current on a locked OS
//     thread first, so goroutines may call from anywhere.
//   - Stage is the pure pipeline that moves device memory over a host-only
//     transport: the bytes go through a few pinned host buffers in chunks,
//     and filling chunk i+1 (a device-to-host copy, or a network receive)
//     overlaps draining chunk i (a network send, or a host-to-device copy).
//     It knows nothing of CUDA: callers pass the fill and drain steps.
//
// # Users and tests
//
// The transfer engine (transfer.Config.Device), the store client
// (store.Config.Device), the Python binding and `mooncake bench transfer
// --device cuda` reach device memory through a *Driver; docs/transfer.md
// ("GPU memory") has the design. The tests run against the simulated
// driver of package cudatest (a C library built with gcc whose device
// memory traps host access); TestRealDriver runs against the real
// libcuda.so.1 and skips, saying so, where there is none.
package cuda
