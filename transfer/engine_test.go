package transfer

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func openEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// pair opens an initiator and a target with the given transport.
func pair(t *testing.T, transport string, mod func(*Config)) (ini, tgt *Engine, seg SegmentID) {
	cfg := Config{Transport: transport, InprocHub: NewHub()}
	if mod != nil {
		mod(&cfg)
	}
	tgt = openEngine(t, cfg)
	ini = openEngine(t, cfg)
	id, err := ini.OpenSegment(ctxT(t), tgt.Name())
	if err != nil {
		t.Fatalf("OpenSegment: %v", err)
	}
	return ini, tgt, id
}

var transports = []string{TransportTCP, TransportInproc, TransportAuto}

func TestRoundTrip(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ini, tgt, seg := pair(t, tr, nil)
			const size = 3<<20 + 123 // several slices, odd tail
			remote := make([]byte, size)
			local := make([]byte, size)
			back := make([]byte, size)
			for _, r := range []struct {
				e *Engine
				b []byte
			}{{tgt, remote}, {ini, local}, {ini, back}} {
				if err := r.e.RegisterBytes(r.b, "cpu:0"); err != nil {
					t.Fatal(err)
				}
			}
			fill(local, 1)
			ctx := ctxT(t)
			if err := ini.Transfer(ctx, []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: size}}); err != nil {
				t.Fatalf("write: %v", err)
			}
			if !bytes.Equal(remote, local) {
				t.Fatal("remote differs after write")
			}
			if err := ini.Transfer(ctx, []Request{{Op: OpRead, Local: AddrOf(back), Segment: seg, Remote: uint64(AddrOf(remote)), Length: size}}); err != nil {
				t.Fatalf("read: %v", err)
			}
			if !bytes.Equal(back, local) {
				t.Fatal("read back differs")
			}
		})
	}
}

func TestManyRequestsOneBatch(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ini, tgt, seg := pair(t, tr, nil)
			const n, bs = 300, 4096
			remote := make([]byte, n*bs)
			local := make([]byte, n*bs)
			fill(local, 2)
			_ = tgt.RegisterBytes(remote, "")
			_ = ini.RegisterBytes(local, "")
			reqs := make([]Request, n)
			for i := range reqs {
				// scatter: request i writes block i to remote block n-1-i
				reqs[i] = Request{Op: OpWrite, Local: AddrOf(local[i*bs:]), Segment: seg, Remote: uint64(AddrOf(remote[(n-1-i)*bs:])), Length: bs}
			}
			b, err := ini.Submit(ctxT(t), reqs)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Wait(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if b.Status(i) != StatusCompleted {
					t.Fatalf("status %d = %v", i, b.Status(i))
				}
				if got := b.Transport(i); got != map[string]string{TransportTCP: "tcp", TransportInproc: "inproc", TransportAuto: "tcp"}[tr] {
					t.Fatalf("transport %q", got)
				}
				if !bytes.Equal(local[i*bs:(i+1)*bs], remote[(n-1-i)*bs:(n-i)*bs]) {
					t.Fatalf("block %d wrong", i)
				}
			}
			b.Free()
		})
	}
}

func TestBoundsRejected(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ini, tgt, seg := pair(t, tr, nil)
			backing := make([]byte, 8192)
			a, bb := backing[:4096:4096], backing[4096:]
			_ = tgt.RegisterBytes(a, "")
			_ = tgt.RegisterBytes(bb, "")
			local := make([]byte, 16384)
			_ = ini.RegisterBytes(local, "")
			unreg := make([]byte, 4096)
			base := uint64(AddrOf(a))
			cases := []struct {
				name   string
				remote uint64
				n      int
			}{
				{"past end", base + 8000, 200},
				{"spans adjacent buffers", base + 4000, 200},
				{"both buffers whole", base, 8192},
				{"before start", base - 16, 32},
				{"unregistered remote", uint64(AddrOf(unreg)), 16},
				{"overflow", ^uint64(0) - 8, 16},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					for _, op := range []Opcode{OpWrite, OpRead} {
						err := ini.Transfer(ctxT(t), []Request{{Op: op, Local: AddrOf(local), Segment: seg, Remote: c.remote, Length: c.n}})
						if !errors.Is(err, ErrOutOfBounds) {
							t.Fatalf("%s: err = %v, want ErrOutOfBounds", opName(op), err)
						}
					}
				})
			}
			// The engine keeps serving after rejections, and a rejected write
			// in the same batch does not hurt a good one.
			src := local[:100]
			fill(src, 3)
			b, err := ini.Submit(ctxT(t), []Request{
				{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: base + 4090, Length: 100},
				{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: base + 4096, Length: 100},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Wait(ctxT(t)); !errors.Is(err, ErrOutOfBounds) {
				t.Fatalf("batch err = %v", err)
			}
			if b.Status(0) != StatusFailed || b.Status(1) != StatusCompleted {
				t.Fatalf("statuses %v %v", b.Status(0), b.Status(1))
			}
			if !errors.Is(b.Err(0), ErrOutOfBounds) || b.Err(1) != nil {
				t.Fatalf("errs %v %v", b.Err(0), b.Err(1))
			}
			b.Free()
			if !bytes.Equal(bb[:100], src) {
				t.Fatal("good write in mixed batch not applied")
			}
			if !bytes.Equal(a[4090:], make([]byte, 6)) {
				t.Fatal("rejected write touched memory")
			}
		})
	}
}

func TestSubmitRejectsBadRequests(t *testing.T) {
	ini, tgt, seg := pair(t, TransportTCP, nil)
	remote := make([]byte, 4096)
	_ = tgt.RegisterBytes(remote, "")
	local := make([]byte, 4096)
	_ = ini.RegisterBytes(local, "")
	unreg := make([]byte, 64)
	ok := Request{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: 64}
	cases := []struct {
		name string
		mut  func(*Request)
		want error
	}{
		{"zero length", func(r *Request) { r.Length = 0 }, ErrInvalid},
		{"negative length", func(r *Request) { r.Length = -1 }, ErrInvalid},
		{"bad opcode", func(r *Request) { r.Op = 7 }, ErrInvalid},
		{"unknown segment id", func(r *Request) { r.Segment = 999 }, ErrUnknownSegment},
		{"local not registered", func(r *Request) { r.Local = AddrOf(unreg) }, ErrNotRegistered},
		{"local past end", func(r *Request) { r.Local = AddrOf(local) + 4090 }, ErrNotRegistered},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ok
			c.mut(&r)
			if _, err := ini.Submit(ctxT(t), []Request{ok, r}); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	// Still serving, and the valid request alone works.
	if err := ini.Transfer(ctxT(t), []Request{ok}); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownSegment(t *testing.T) {
	e := openEngine(t, Config{})
	// A port nobody listens on: open an engine, note its name, close it.
	gone, err := Open(ctxT(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	name := gone.Name()
	_ = gone.Close()
	if _, err := e.OpenSegment(ctxT(t), name); !errors.Is(err, ErrUnknownSegment) {
		t.Fatalf("err = %v, want ErrUnknownSegment", err)
	}
	ie := openEngine(t, Config{Transport: TransportInproc, InprocHub: NewHub()})
	if _, err := ie.OpenSegment(ctxT(t), "127.0.0.1:1"); !errors.Is(err, ErrUnknownSegment) {
		t.Fatalf("inproc err = %v", err)
	}
}

func TestSegmentDescriptor(t *testing.T) {
	ini, tgt, _ := pair(t, TransportTCP, nil)
	b1 := make([]byte, 1000)
	_ = tgt.RegisterBytes(b1, "cpu:1")
	d, err := ini.Segment(ctxT(t), tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != tgt.Name() || len(d.Buffers) != 1 || d.Buffers[0].Addr != uint64(AddrOf(b1)) || d.Buffers[0].Length != 1000 || d.Buffers[0].Location != "cpu:1" {
		t.Fatalf("descriptor %+v", d)
	}
	if err := tgt.Unregister(AddrOf(b1)); err != nil {
		t.Fatal(err)
	}
	d, _ = ini.Segment(ctxT(t), tgt.Name())
	if len(d.Buffers) != 0 {
		t.Fatalf("buffers after unregister: %+v", d.Buffers)
	}
	if err := tgt.Unregister(AddrOf(b1)); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("double unregister: %v", err)
	}
}

func TestNotifyAndProbe(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ini, tgt, _ := pair(t, tr, nil)
			if err := ini.Probe(ctxT(t), tgt.Name()); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := ini.Notify(ctxT(t), tgt.Name(), "done", []byte{byte(i)}); err != nil {
					t.Fatal(err)
				}
			}
			got := tgt.Notifies()
			if len(got) != 3 || got[2].Name != "done" || got[2].From != ini.Name() || !bytes.Equal(got[2].Msg, []byte{2}) {
				t.Fatalf("notifies %+v", got)
			}
			if len(tgt.Notifies()) != 0 {
				t.Fatal("Notifies did not drain")
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	for name, c := range map[string]Config{
		"transport": {Transport: "rdma"},
		"metadata":  {Metadata: "redis://x"},
		"port":      {RPCPort: 70000},
		"slice":     {SliceSize: 100},
		"lanes":     {Lanes: -1},
		"host:port": {LocalHostname: "127.0.0.1:1234"},
		"no hub":    {Transport: TransportInproc},
		"link rate": {LinkRate: -1},
		"burst":     {LinkRate: 1e6, LinkBurst: -5},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
