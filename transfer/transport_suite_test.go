package transfer

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// suiteEnv is one initiator and one target engine on one transport, the
// target's managed buffer opened as seg.
type suiteEnv struct {
	ini, tgt *Engine
	seg      SegmentID
	remote   []byte // the target's managed buffer
	local    []byte // registered at the initiator
	want     string // the transport that must serve in-bounds requests
}

const suiteBuf = 2<<20 + 4096

// suiteTransports are the transports every behaviour test runs against.
var suiteTransports = []string{TransportTCP, TransportShm, TransportInproc}

// enginePair opens a target and an initiator that reach each other over tr
// (with one inproc hub between them).
func enginePair(t *testing.T, tr string) (tgt, ini *Engine) {
	t.Helper()
	hub := NewHub()
	return openEngine(t, Config{Transport: tr, InprocHub: hub}), openEngine(t, Config{Transport: tr, InprocHub: hub})
}

func newSuiteEnv(t *testing.T, tr string) *suiteEnv {
	t.Helper()
	env := &suiteEnv{want: tr}
	env.tgt, env.ini = enginePair(t, tr)
	var err error
	// Managed (memfd) memory, so that the shm transport can serve it.
	if env.remote, err = env.tgt.AllocateManaged(suiteBuf); err != nil {
		t.Fatal(err)
	}
	env.local = make([]byte, suiteBuf)
	if err := env.ini.RegisterBytes(env.local, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	if env.seg, err = env.ini.OpenSegment(ctxT(t), env.tgt.Name()); err != nil {
		t.Fatal(err)
	}
	return env
}

func (env *suiteEnv) req(op Opcode, off, n int) Request {
	return Request{Op: op, Local: AddrOf(env.local[off:]), Segment: env.seg, Remote: uint64(AddrOf(env.remote)) + uint64(off), Length: n}
}

// run submits reqs and waits; it returns the batch's transports and error.
func (env *suiteEnv) run(t *testing.T, reqs ...Request) ([]string, error) {
	t.Helper()
	b, err := env.ini.Submit(ctxT(t), reqs)
	if err != nil {
		return nil, err
	}
	defer b.Free()
	err = b.Wait(ctxT(t))
	trs := make([]string, b.Len())
	for i := range trs {
		trs[i] = b.Transport(i)
	}
	return trs, err
}

// TestTransportBehaviour runs one table of behaviours against every
// transport: what a caller sees must not depend on how the bytes move.
func TestTransportBehaviour(t *testing.T) {
	cases := []struct {
		name string
		test func(t *testing.T, env *suiteEnv)
	}{
		{"round trip of every size", func(t *testing.T, env *suiteEnv) {
			for _, n := range []int{1, 7, 4096 + 3, 64 << 10, 1<<20 + 123, suiteBuf} {
				fill(env.local[:n], uint64(n))
				want := bytes.Clone(env.local[:n])
				trs, err := env.run(t, env.req(OpWrite, 0, n))
				if err != nil || trs[0] != env.want {
					t.Fatalf("write %d: %v via %v", n, err, trs)
				}
				if !bytes.Equal(env.remote[:n], want) {
					t.Fatalf("write %d: remote differs", n)
				}
				clear(env.local[:n])
				trs, err = env.run(t, env.req(OpRead, 0, n))
				if err != nil || trs[0] != env.want {
					t.Fatalf("read %d: %v via %v", n, err, trs)
				}
				if !bytes.Equal(env.local[:n], want) {
					t.Fatalf("read %d: local differs", n)
				}
			}
		}},
		{"many requests in one batch", func(t *testing.T, env *suiteEnv) {
			fill(env.local, 5)
			var reqs []Request
			for off := 0; off+4099 <= suiteBuf; off += 4099 * 3 {
				reqs = append(reqs, env.req(OpWrite, off, 4099))
			}
			if _, err := env.run(t, reqs...); err != nil {
				t.Fatal(err)
			}
			for _, r := range reqs {
				off := int(r.Remote - uint64(AddrOf(env.remote)))
				if !bytes.Equal(env.remote[off:off+r.Length], env.local[off:off+r.Length]) {
					t.Fatalf("request at %d differs", off)
				}
			}
		}},
		{"zero length", func(t *testing.T, env *suiteEnv) {
			if _, err := env.run(t, env.req(OpWrite, 0, 0)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		}},
		{"out of bounds", func(t *testing.T, env *suiteEnv) {
			for _, op := range []Opcode{OpWrite, OpRead} {
				r := env.req(op, 0, 20)
				r.Remote += suiteBuf - 10 // straddles the end of the buffer
				if _, err := env.run(t, r); !errors.Is(err, ErrOutOfBounds) {
					t.Fatalf("%s: err = %v, want ErrOutOfBounds", opName(op), err)
				}
			}
		}},
		{"remote not registered", func(t *testing.T, env *suiteEnv) {
			r := env.req(OpWrite, 0, 64)
			r.Remote = uint64(AddrOf(env.local)) // memory of the initiator, not of the target
			if _, err := env.run(t, r); !errors.Is(err, ErrOutOfBounds) {
				t.Fatalf("err = %v, want ErrOutOfBounds", err)
			}
		}},
		{"local not registered", func(t *testing.T, env *suiteEnv) {
			r := env.req(OpWrite, 0, 64)
			r.Local = AddrOf(make([]byte, 64))
			if _, err := env.run(t, r); !errors.Is(err, ErrNotRegistered) {
				t.Fatalf("err = %v, want ErrNotRegistered", err)
			}
		}},
		{"unknown segment", func(t *testing.T, env *suiteEnv) {
			r := env.req(OpWrite, 0, 64)
			r.Segment = env.seg + 1000
			if _, err := env.run(t, r); !errors.Is(err, ErrUnknownSegment) {
				t.Fatalf("submit: err = %v, want ErrUnknownSegment", err)
			}
			if _, err := env.ini.OpenSegment(ctxT(t), "127.0.0.1:1"); !errors.Is(err, ErrUnknownSegment) {
				t.Fatalf("open: err = %v, want ErrUnknownSegment", err)
			}
			if err := env.ini.PreparePeer(ctxT(t), "127.0.0.1:1"); !errors.Is(err, ErrUnknownSegment) {
				t.Fatalf("prepare: err = %v, want ErrUnknownSegment", err)
			}
		}},
		{"peer closed", func(t *testing.T, env *suiteEnv) {
			if _, err := env.run(t, env.req(OpWrite, 0, 64)); err != nil {
				t.Fatal(err)
			}
			if err := env.tgt.Close(); err != nil {
				t.Fatal(err)
			}
			// A mapping may outlive the peer for a moment (the shm client
			// learns of the closed socket asynchronously): poll.
			var err error
			waitfor.Cond(t, 10*time.Second, "a transfer to the closed peer to fail", func() bool {
				_, err = env.run(t, env.req(OpWrite, 0, 64))
				return err != nil
			})
			if !errors.Is(err, ErrPeerDown) {
				t.Fatalf("err = %v, want ErrPeerDown", err)
			}
		}},
	}
	for _, tr := range suiteTransports {
		t.Run(tr, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.test(t, newSuiteEnv(t, tr)) })
			}
		})
	}
}

// TestPreparePeer: a peer prepared after it registered memory is served
// by shared memory from the first request on, without waiting for the
// cached descriptor to go stale; preparing twice is fine.
func TestPreparePeer(t *testing.T) {
	for _, tr := range suiteTransports {
		t.Run(tr, func(t *testing.T) {
			tgt, ini := enginePair(t, tr)
			seg, err := ini.OpenSegment(ctxT(t), tgt.Name())
			if err != nil {
				t.Fatal(err)
			}
			// Registered after the initiator fetched the descriptor.
			remote, err := tgt.AllocateManaged(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			local := make([]byte, 1<<20)
			fill(local, 9)
			_ = ini.RegisterBytes(local, "")
			for i := range 2 {
				if err := ini.PreparePeer(ctxT(t), tgt.Name()); err != nil {
					t.Fatalf("prepare %d: %v", i, err)
				}
			}
			b, err := ini.Submit(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: len(local)}})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			if err := b.Wait(ctxT(t)); err != nil || b.Transport(0) != tr {
				t.Fatalf("write: %v via %s, want %s", err, b.Transport(0), tr)
			}
			if !bytes.Equal(remote, local) {
				t.Fatal("remote differs")
			}
		})
	}
}

// TestPreparePeerNewSegment: PreparePeer opens a segment not opened yet.
func TestPreparePeerNewSegment(t *testing.T) {
	for _, tr := range suiteTransports {
		t.Run(tr, func(t *testing.T) {
			tgt, ini := enginePair(t, tr)
			if _, err := tgt.AllocateManaged(4096); err != nil {
				t.Fatal(err)
			}
			if err := ini.PreparePeer(ctxT(t), tgt.Name()); err != nil {
				t.Fatal(err)
			}
			ini.segMu.Lock()
			_, ok := ini.segByName[tgt.Name()]
			ini.segMu.Unlock()
			if !ok {
				t.Fatalf("segment %s not opened", tgt.Name())
			}
		})
	}
}
