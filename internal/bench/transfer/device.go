package transfer

import (
	"fmt"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/cuda"
	"github.com/kvcache-go/mooncake/transfer"
)

// Device runs (`--device cuda`): the initiator's buffer, the target's or
// both are device memory of device 0, registered with the engine, which
// stages them through pinned host memory over tcp or copies device to
// device over CUDA IPC on shm. The baseline is then the host's pinned
// cuMemcpy bandwidth (StageChunk-sized copies, the slower of host->device
// and device->host), measured before and after the run like the others.

// drivers holds the driver loaded for each library path (one per process:
// every engine of the process must use the same one).
var drivers struct {
	mu sync.Mutex
	m  map[string]*cuda.Driver
}

// Driver loads (once per process) the CUDA driver at lib ("": libcuda.so.1).
func Driver(lib string) (*cuda.Driver, error) {
	drivers.mu.Lock()
	defer drivers.mu.Unlock()
	if d, ok := drivers.m[lib]; ok {
		return d, nil
	}
	d, err := cuda.Load(lib)
	if err != nil {
		return nil, err
	}
	if n, err := d.DeviceCount(); err != nil || n == 0 {
		return nil, fmt.Errorf("%w: no device (%v)", cuda.ErrNoDriver, err)
	}
	if drivers.m == nil {
		drivers.m = map[string]*cuda.Driver{}
	}
	drivers.m[lib] = d
	return d, nil
}

func (c *Config) deviceName() string {
	if c.Device == "" {
		return "cpu"
	}
	return c.Device
}

func (c *Config) targetDevice() string {
	if c.TargetDevice == "" {
		return c.deviceName()
	}
	return c.TargetDevice
}

// device reports whether either side is device memory.
func (c *Config) device() bool { return c.deviceName() == "cuda" || c.targetDevice() == "cuda" }

func (c *Config) validateDevice() error {
	for _, d := range []string{c.deviceName(), c.targetDevice()} {
		if d != "cpu" && d != "cuda" {
			return fmt.Errorf("bench transfer: device %q: want cpu or cuda", d)
		}
	}
	if c.device() {
		if c.Transport == "inproc" {
			return fmt.Errorf("bench transfer: --device cuda runs over tcp or shm")
		}
		if _, err := Driver(c.CUDALib); err != nil {
			return fmt.Errorf("bench transfer: --device cuda: %w", err)
		}
	}
	return nil
}

// driverOrNil is the engine's Config.Device: the driver for device runs.
func (c *Config) driverOrNil() transfer.Device {
	if !c.device() {
		return nil
	}
	d, err := Driver(c.CUDALib)
	if err != nil {
		return nil
	}
	return d
}

// allocateDevice allocates and registers n bytes of device 0.
func (c *Config) allocateDevice(e *transfer.Engine, n int) (uintptr, func(), error) {
	d, err := Driver(c.CUDALib)
	if err != nil {
		return 0, nil, err
	}
	p, err := d.MemAlloc(0, n)
	if err != nil {
		return 0, nil, err
	}
	// Fill it once (device memory starts undefined; a page never written
	// may cost more the first time).
	if err := d.CopyFromHost(0, p, make([]byte, n)); err != nil {
		_ = d.MemFree(0, p)
		return 0, nil, err
	}
	if err := e.RegisterDevice(p, n, ""); err != nil {
		_ = d.MemFree(0, p)
		return 0, nil, err
	}
	return p, func() { _ = d.MemFree(0, p) }, nil
}

// PinnedCopy measures pinned cuMemcpy bandwidth (bytes/s) in both
// directions with copies of chunk bytes for about d each.
func PinnedCopy(d *cuda.Driver, chunk int, dur time.Duration) (h2d, d2h float64, err error) {
	host, err := d.HostAlloc(0, chunk)
	if err != nil {
		return 0, 0, err
	}
	defer d.HostFree(0, host)
	dev, err := d.MemAlloc(0, chunk)
	if err != nil {
		return 0, 0, err
	}
	defer d.MemFree(0, dev)
	measure := func(f func() error) (float64, error) {
		var n int
		start := time.Now()
		for time.Since(start) < dur || n == 0 {
			if err := f(); err != nil {
				return 0, err
			}
			n++
		}
		return float64(n*chunk) / time.Since(start).Seconds(), nil
	}
	if h2d, err = measure(func() error { return d.CopyFromHost(0, dev, host) }); err != nil {
		return 0, 0, err
	}
	d2h, err = measure(func() error { return d.CopyToHost(0, host, dev) })
	return h2d, d2h, err
}

// pinnedCopyLimit is the device baseline: the slower direction of pinned
// cuMemcpy with the engine's staging chunk, in GB/s.
func (c *Config) pinnedCopyLimit(dur time.Duration) (float64, error) {
	d, err := Driver(c.CUDALib)
	if err != nil {
		return 0, err
	}
	h2d, d2h, err := PinnedCopy(d, transfer.DefaultStageChunk, dur/2)
	if err != nil {
		return 0, err
	}
	return min(h2d, d2h) / 1e9, nil
}
