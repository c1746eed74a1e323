package transfer

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/cuda/cudatest"
	"github.com/kvcache-go/mooncake/internal/grant"
)

// TestGrantsDevice: device memory behind a target that checks grants
// (the simulated device): no CUDA IPC handle is published, a device ->
// device write staged through host memory passes with a grant (every
// staged piece carries it) and is refused without one, leaving the
// target's device memory as it was.
func TestGrantsDevice(t *testing.T) {
	keys := testKeys(t, "device-grant-key-0123456789")
	d := cudatest.Driver(t)
	ini, tgt, seg := pair(t, TransportAuto, func(c *Config) {
		c.Device = d
		c.StageChunk = 64 << 10
		c.StageBuffers = 2
		c.Grants = grant.NewVerifier(keys, nil)
	})
	const n = 256<<10 + 7 // several staging chunks
	lDev := allocDev(t, d, 0, n)
	rDev := allocDev(t, d, cudatest.SecondDevice(d), n)
	if err := ini.Register(lDev.p, lDev.n, ""); err != nil {
		t.Fatal(err)
	}
	if err := tgt.Register(rDev.p, rDev.n, ""); err != nil {
		t.Fatal(err)
	}
	for _, b := range tgt.descriptor().Buffers {
		if b.CUDAIPC != "" {
			t.Fatal("an engine with grants publishes a CUDA IPC handle")
		}
	}
	orig := make([]byte, n)
	fill(orig, 7)
	rDev.set(t, orig)
	src := make([]byte, n)
	fill(src, 8)
	lDev.set(t, src)
	err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: lDev.p, Segment: seg, Remote: uint64(rDev.p), Length: n}})
	if !errors.Is(err, ErrDenied) {
		t.Fatalf("without a grant: %v", err)
	}
	if !bytes.Equal(rDev.get(t), orig) {
		t.Fatal("refused write changed device memory")
	}
	g, err := keys.Encode(grant.Grant{Segment: tgt.Name(), Addr: uint64(rDev.p), Length: n, Mode: grant.Write, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: lDev.p, Segment: seg, Remote: uint64(rDev.p), Length: n, Grant: string(g)}}); err != nil {
		t.Fatalf("with a grant: %v", err)
	}
	if !bytes.Equal(rDev.get(t), src) {
		t.Fatal("granted device write: bytes differ")
	}
}
