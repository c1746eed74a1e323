package store_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvcache-go/mooncake/internal/cuda"
	"github.com/kvcache-go/mooncake/internal/cuda/cudatest"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/store"
)

// TestDeviceBuffers puts from device memory and reads into host memory,
// and the reverse, singly and in batches, against the simulated device
// (whose memory the host cannot touch).
func TestDeviceBuffers(t *testing.T) {
	d := cudatest.Driver(t)
	cl := newCluster(t, master.Config{}, 1, 64<<20).client(func(c *store.Config) { c.Device = d })
	const n = 300<<10 + 5
	alloc := func(size int) uintptr {
		p, err := d.MemAlloc(0, size)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.MemFree(0, p) })
		return p
	}
	src, dst := alloc(n), alloc(n)
	want := value("dev", n)
	if err := d.CopyFromHost(0, src, want); err != nil {
		t.Fatal(err)
	}
	if !cl.IsDevice(src) || cl.IsDevice(cuda.HostAddr(want)) {
		t.Fatal("IsDevice does not tell device from host memory")
	}
	// device -> store -> host
	if err := cl.PutFromDevice(ctxT(t), "dev", src, n, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.Get(ctxT(t), "dev"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("host get of a device put: %v", err)
	}
	// host -> store -> device
	hostVal := value("host", 1000)
	if err := cl.Put(ctxT(t), "host", hostVal); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.GetIntoDevice(ctxT(t), "host", dst, n); err != nil || got != len(hostVal) {
		t.Fatalf("GetIntoDevice = %d, %v", got, err)
	}
	back := make([]byte, len(hostVal))
	if err := d.CopyToHost(0, back, dst); err != nil || !bytes.Equal(back, hostVal) {
		t.Fatalf("device copy of a host put differs (%v)", err)
	}
	// device -> store -> device
	if got, err := cl.GetIntoDevice(ctxT(t), "dev", dst, n); err != nil || got != n {
		t.Fatalf("GetIntoDevice(dev) = %d, %v", got, err)
	}
	back = make([]byte, n)
	if err := d.CopyToHost(0, back, dst); err != nil || !bytes.Equal(back, want) {
		t.Fatal("device -> store -> device changed the bytes")
	}
	// Too small a device buffer; host memory given as device memory.
	if _, err := cl.GetIntoDevice(ctxT(t), "dev", dst, n-1); !errors.Is(err, store.ErrBufferTooSmall) {
		t.Fatalf("small device buffer: %v", err)
	}
	if err := cl.PutFromDevice(ctxT(t), "x", cuda.HostAddr(want), 10, store.PutOptions{}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("host memory as a device buffer: %v", err)
	}

	// Batches: three blocks of one device allocation.
	const blk = 64 << 10
	base, out := alloc(3*blk), alloc(3*blk)
	blocks := value("blocks", 3*blk)
	if err := d.CopyFromHost(0, base, blocks); err != nil {
		t.Fatal(err)
	}
	keys := []string{"b0", "b1", "b2"}
	srcs := []uintptr{base, base + blk, base + 2*blk}
	dsts := []uintptr{out + 2*blk, out + blk, out} // reversed
	sizes := []int{blk, blk, blk}
	for i, err := range cl.BatchPutFromDevice(ctxT(t), keys, srcs, sizes, store.PutOptions{}) {
		if err != nil {
			t.Fatalf("batch put %d: %v", i, err)
		}
	}
	got, errs := cl.BatchGetIntoDevice(ctxT(t), append(keys, "missing"), append(dsts, out), append(sizes, blk))
	for i := range keys {
		if errs[i] != nil || got[i] != blk {
			t.Fatalf("batch get %d: %d %v", i, got[i], errs[i])
		}
	}
	if !errors.Is(errs[3], store.ErrNotFound) {
		t.Fatalf("batch get of a missing key: %v", errs[3])
	}
	back = make([]byte, 3*blk)
	if err := d.CopyToHost(0, back, out); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !bytes.Equal(back[(2-i)*blk:(3-i)*blk], blocks[i*blk:(i+1)*blk]) {
			t.Fatalf("batch block %d differs", i)
		}
	}
}
