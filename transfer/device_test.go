package transfer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/kvcache-go/mooncake/internal/cuda"
	"github.com/kvcache-go/mooncake/internal/cuda/cudatest"
)

// devMem is an allocation of the simulated device, read and written only
// through the driver (the host cannot touch it).
type devMem struct {
	d   *cuda.Driver
	dev int
	p   uintptr
	n   int
}

func allocDev(t *testing.T, d *cuda.Driver, dev, n int) devMem {
	t.Helper()
	p, err := d.MemAlloc(dev, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.MemFree(dev, p) })
	return devMem{d, dev, p, n}
}

func (m devMem) set(t *testing.T, b []byte) {
	t.Helper()
	if err := m.d.CopyFromHost(m.dev, m.p, b); err != nil {
		t.Fatal(err)
	}
}

func (m devMem) get(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, m.n)
	if err := m.d.CopyToHost(m.dev, b, m.p); err != nil {
		t.Fatal(err)
	}
	return b
}

// devPair opens two engines with the simulated device over transport tr,
// with staging chunks small enough that a transfer takes several.
func devPair(t *testing.T, tr string) (d *cuda.Driver, ini, tgt *Engine, seg SegmentID) {
	d = cudatest.Driver(t)
	ini, tgt, seg = pair(t, tr, func(c *Config) {
		c.Device = d
		c.StageChunk = 64 << 10
		c.StageBuffers = 2
	})
	return d, ini, tgt, seg
}

// TestDeviceEitherSide moves bytes where the local side, the remote side
// or both are device memory, over every transport, and checks every byte.
func TestDeviceEitherSide(t *testing.T) {
	const n = 1<<20 + 4097 // not a multiple of the staging chunk
	for _, tr := range []string{TransportTCP, TransportAuto, TransportInproc} {
		t.Run(tr, func(t *testing.T) {
			d, ini, tgt, seg := devPair(t, tr)
			lDev := allocDev(t, d, 0, n)
			rDev := allocDev(t, d, cudatest.SecondDevice(d), n)
			lHost := make([]byte, n)
			rHost, err := tgt.AllocateManaged(n) // shared memory reaches it on "auto"
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []devMem{lDev} {
				if err := ini.Register(m.p, m.n, ""); err != nil {
					t.Fatal(err)
				}
			}
			if err := ini.RegisterBytes(lHost, ""); err != nil {
				t.Fatal(err)
			}
			if err := tgt.Register(rDev.p, rDev.n, ""); err != nil {
				t.Fatal(err)
			}
			if loc := fmt.Sprintf("cuda:%d", rDev.dev); !hasLocation(tgt.Buffers(), loc) {
				t.Fatalf("target buffers %+v: no %s buffer", tgt.Buffers(), loc)
			}
			rHostAddr := uint64(AddrOf(rHost))
			cases := []struct {
				name   string
				op     Opcode
				local  uintptr
				remote uint64
				setSrc func([]byte)
				getDst func() []byte
			}{
				{"write dev->dev", OpWrite, lDev.p, uint64(rDev.p), func(b []byte) { lDev.set(t, b) }, func() []byte { return rDev.get(t) }},
				{"read dev<-dev", OpRead, lDev.p, uint64(rDev.p), func(b []byte) { rDev.set(t, b) }, func() []byte { return lDev.get(t) }},
				{"write dev->host", OpWrite, lDev.p, rHostAddr, func(b []byte) { lDev.set(t, b) }, func() []byte { return bytes.Clone(rHost) }},
				{"read dev<-host", OpRead, lDev.p, rHostAddr, func(b []byte) { copy(rHost, b) }, func() []byte { return lDev.get(t) }},
				{"write host->dev", OpWrite, AddrOf(lHost), uint64(rDev.p), func(b []byte) { copy(lHost, b) }, func() []byte { return rDev.get(t) }},
				{"read host<-dev", OpRead, AddrOf(lHost), uint64(rDev.p), func(b []byte) { rDev.set(t, b) }, func() []byte { return bytes.Clone(lHost) }},
			}
			for i, c := range cases {
				src := make([]byte, n)
				fill(src, uint64(i+1))
				c.setSrc(src)
				err := ini.Transfer(ctxT(t), []Request{{Op: c.op, Local: c.local, Segment: seg, Remote: c.remote, Length: n}})
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if got := c.getDst(); !bytes.Equal(got, src) {
					t.Fatalf("%s: bytes differ", c.name)
				}
			}
			// The pinned staging arenas are the engine's own: never listed.
			if hasLocation(ini.Buffers(), stagingLocation) {
				t.Fatalf("staging arena listed: %+v", ini.Buffers())
			}
		})
	}
}

func hasLocation(bs []BufferDesc, loc string) bool {
	for _, b := range bs {
		if b.Location == loc {
			return true
		}
	}
	return false
}

// TestDevicePDKVCache is the P/D path of vLLM's connector: the prefill
// engine writes KV blocks from its device KV cache into scattered blocks
// of the decode engine's device KV cache, one batch per layer; the decode
// cache ends equal byte for byte.
func TestDevicePDKVCache(t *testing.T) {
	for _, tr := range []string{TransportTCP, TransportInproc} {
		t.Run(tr, func(t *testing.T) {
			d, prefill, decode, seg := devPair(t, tr)
			const layers, blocks, block = 4, 32, 16 << 10
			pKV := allocDev(t, d, 0, layers*blocks*block)
			dKV := allocDev(t, d, cudatest.SecondDevice(d), layers*blocks*block)
			if err := prefill.Register(pKV.p, pKV.n, ""); err != nil {
				t.Fatal(err)
			}
			if err := decode.Register(dKV.p, dKV.n, ""); err != nil {
				t.Fatal(err)
			}
			kv := make([]byte, pKV.n)
			fill(kv, 42)
			pKV.set(t, kv)
			dKV.set(t, make([]byte, dKV.n))
			// Block i of the prefill goes to block perm(i) of the decode side.
			perm := func(i int) int { return (i*7 + 3) % blocks }
			want := make([]byte, dKV.n)
			for l := range layers {
				var reqs []Request
				for i := range blocks {
					src := (l*blocks + i) * block
					dst := (l*blocks + perm(i)) * block
					reqs = append(reqs, Request{Op: OpWrite, Local: pKV.p + uintptr(src), Segment: seg, Remote: uint64(dKV.p) + uint64(dst), Length: block})
					copy(want[dst:dst+block], kv[src:src+block])
				}
				if err := prefill.Transfer(ctxT(t), reqs); err != nil {
					t.Fatalf("layer %d: %v", l, err)
				}
			}
			if got := dKV.get(t); !bytes.Equal(got, want) {
				t.Fatal("decode KV cache differs from what the prefill sent")
			}
		})
	}
}

func TestDeviceBounds(t *testing.T) {
	d, ini, tgt, seg := devPair(t, TransportTCP)
	m := allocDev(t, d, 0, 1<<20)
	if err := ini.RegisterDevice(m.p, 64<<20, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("registering beyond the allocation: %v", err)
	}
	host := make([]byte, 64)
	if err := ini.RegisterDevice(AddrOf(host), 64, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("registering host memory as device memory: %v", err)
	}
	if err := ini.RegisterDevice(m.p, 1<<19, "gpu-a"); err != nil {
		t.Fatal(err)
	}
	if err := ini.RegisterDevice(m.p+4096, 16, ""); err == nil {
		t.Fatal("overlapping device registration accepted")
	}
	r := allocDev(t, d, cudatest.SecondDevice(d), 1<<20)
	if err := tgt.Register(r.p, 1<<19, ""); err != nil {
		t.Fatal(err)
	}
	// Local range past the registered part: refused at Submit.
	err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: m.p + 1<<19 - 10, Segment: seg, Remote: uint64(r.p), Length: 100}})
	if !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("local device range past its buffer: %v", err)
	}
	// Remote range past the peer's registered device memory: its bounds check.
	for _, op := range []Opcode{OpWrite, OpRead} {
		err = ini.Transfer(ctxT(t), []Request{{Op: op, Local: m.p, Segment: seg, Remote: uint64(r.p) + 1<<19 - 10, Length: 100}})
		if !errors.Is(err, ErrOutOfBounds) {
			t.Fatalf("%s past the peer's device buffer: %v", opName(op), err)
		}
	}
	// Unregistered device memory is refused afterwards.
	if err := tgt.Unregister(r.p); err != nil {
		t.Fatal(err)
	}
	err = ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: m.p, Segment: seg, Remote: uint64(r.p), Length: 100}})
	if !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("write to unregistered device memory: %v", err)
	}
	// An engine without a driver refuses device registration.
	plain := openEngine(t, Config{})
	if err := plain.RegisterDevice(m.p, 16, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("RegisterDevice without a driver: %v", err)
	}
}

// runDevicePeerProcess is a target engine in its own process with a device
// buffer of the simulated driver at lib; it prints "<segment> <addr> <len>".
func runDevicePeerProcess(size int, lib string) int {
	d, err := cuda.Load(lib)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer d.Close()
	e, err := Open(context.Background(), Config{Transport: os.Getenv("TRANSFER_TEST_TRANSPORT"), Device: d})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, err := d.MemAlloc(0, size)
	if err == nil {
		err = e.Register(p, size, "")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s %d %d\n", e.Name(), p, size)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = e.Close()
	_ = d.MemFree(0, p)
	return 0
}

// TestDeviceAcrossProcesses: a peer process holds device memory. Over
// shared memory the engine opens it with CUDA IPC and copies device to
// device; over TCP the peer stages it through its pinned buffers. What one
// path writes, the other reads back.
func TestDeviceAcrossProcesses(t *testing.T) {
	lib := cudatest.Library(t)
	d, err := cuda.Load(lib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() }) // after the engines' cleanups
	const n = 3<<20 + 100
	t.Setenv("TRANSFER_TEST_CUDA", lib)
	peer := startPeer(t, n, TransportAuto)
	local := allocDev(t, d, 0, n)
	byIPC := openEngine(t, Config{Device: d})
	byTCP := openEngine(t, Config{Device: d, Transport: TransportTCP, StageChunk: 1 << 20})
	src := make([]byte, n)
	fill(src, 7)
	local.set(t, src)
	for _, e := range []*Engine{byIPC, byTCP} {
		if err := e.Register(local.p, n, ""); err != nil {
			t.Fatal(err)
		}
	}
	seg, err := byIPC.OpenSegment(ctxT(t), peer.name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := byIPC.Submit(ctxT(t), []Request{{Op: OpWrite, Local: local.p, Segment: seg, Remote: peer.addr, Length: n}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if tr := b.Transport(0); tr != TransportShm {
		t.Fatalf("same-host device write went over %s, want shm (CUDA IPC)", tr)
	}
	b.Free()
	local.set(t, make([]byte, n))
	seg2, err := byTCP.OpenSegment(ctxT(t), peer.name)
	if err != nil {
		t.Fatal(err)
	}
	if err := byTCP.Transfer(ctxT(t), []Request{{Op: OpRead, Local: local.p, Segment: seg2, Remote: peer.addr, Length: n}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local.get(t), src) {
		t.Fatal("read back over TCP differs from what was written over CUDA IPC")
	}
}
