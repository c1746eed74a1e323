package store

import (
	"context"
	"fmt"

	benchtransfer "github.com/kvcache-go/mooncake/internal/bench/transfer"
	"github.com/kvcache-go/mooncake/internal/cuda"
	"github.com/kvcache-go/mooncake/store"
)

// deviceBuf is one client's GPU buffer for the device phases.
type deviceBuf struct {
	d *cuda.Driver
	p uintptr
	n int
}

func (b *deviceBuf) free() {
	if b != nil {
		_ = b.d.MemFree(0, b.p)
	}
}

func (c Config) validateDevice() error {
	switch c.Device {
	case "", "cpu":
		return nil
	case "cuda":
		_, err := benchtransfer.Driver(c.CUDALib)
		if err != nil {
			return fmt.Errorf("bench store: --device cuda: %w", err)
		}
		return nil
	}
	return fmt.Errorf("bench store: --device %q: want cpu or cuda", c.Device)
}

// deviceBuffer gives a client of a device run its driver and a GPU buffer
// of n bytes (filled once); nil for host runs.
func (c Config) deviceBuffer(scfg *store.Config, n int) (*deviceBuf, error) {
	if c.Device != "cuda" {
		return nil, nil
	}
	d, err := benchtransfer.Driver(c.CUDALib)
	if err != nil {
		return nil, err
	}
	p, err := d.MemAlloc(0, n)
	if err != nil {
		return nil, err
	}
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(i * 13)
	}
	if err := d.CopyFromHost(0, p, v); err != nil {
		_ = d.MemFree(0, p)
		return nil, err
	}
	scfg.Device = d
	return &deviceBuf{d: d, p: p, n: n}, nil
}

// putDevice stores size bytes of the client's GPU buffer under key.
func (m *mooncakeKV) putDevice(ctx context.Context, key string, size int) error {
	return m.cl.PutFromDevice(ctx, key, m.dev.p, size, store.PutOptions{Upsert: true})
}

// getIntoDevice reads key into the client's GPU buffer.
func (m *mooncakeKV) getIntoDevice(ctx context.Context, key string) (int, error) {
	return m.cl.GetIntoDevice(ctx, key, m.dev.p, m.dev.n)
}
