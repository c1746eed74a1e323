package pdconnector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/transfer"
)

// snapshotKV reads every block of every layer of r.
func snapshotKV(r interface {
	ReadBlock([]byte, int, int) []byte
}) [][]byte {
	var out [][]byte
	for l := range testLayout.NumLayers {
		for b := range testLayout.NumBlocks {
			out = append(out, r.ReadBlock(nil, l, b))
		}
	}
	return out
}

// TestPullGrants: a decode engine that checks grants takes a pull's
// writes (prefill attaches decode's one-shot grants), for equal and
// different TP on the two sides; then a peer holding valid engine
// credentials writes into blocks the pull did not grant, with a grant of
// another pull, with a replayed (released) grant and with none: each is
// refused and decode's KV cache reads back unchanged.
func TestPullGrants(t *testing.T) {
	for _, tp := range [][2]int{{1, 1}, {2, 1}, {1, 2}} {
		t.Run(fmt.Sprintf("tp%d-to-tp%d", tp[0], tp[1]), func(t *testing.T) { testPullGrants(t, tp[0], tp[1], false) })
	}
	t.Run("whole-request", func(t *testing.T) { testPullGrants(t, 2, 1, true) })
}

func testPullGrants(t *testing.T, p, q int, whole bool) {
	keys, err := grant.ParseKeys([]byte("1:" + grant.NewKeyHex()))
	if err != nil {
		t.Fatal(err)
	}
	v := grant.NewVerifier(keys, nil)
	const secret = "pd-engine-secret"
	preTE, err := transfer.Open(t.Context(), transfer.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = preTE.Close() })
	decTE, err := transfer.Open(t.Context(), transfer.Config{Secret: secret, Grants: v})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = decTE.Close() })
	ln := listen(t)
	pre, err := New(Config{Role: RoleProducer, Transfer: preTE, BootstrapAddr: ln.Addr().String(), WholeRequest: whole})
	if err != nil {
		t.Fatal(err)
	}
	running(t, pre, ln)
	dec, err := New(Config{Role: RoleConsumer, Transfer: decTE, Grants: v})
	if err != nil {
		t.Fatal(err)
	}
	running(t, dec, nil)
	src := kvFor(t, pre, 1, p)
	dst := kvFor(t, dec, 100, q)

	pre.mu.Lock()
	pre.prod.Finished("xfer-1", "req-1", []int{0, 1, 2}, 10, true, pre.clock.Now())
	pre.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	resp, err := dec.pull(ctx, PullSpec{ReqID: "req-1", TransferID: "xfer-1", Bootstrap: pre.BootstrapAddr(),
		EngineID: pre.EngineID(), NumTokens: 10, FirstBlock: 0, BlockIDs: []int{5, 6, 7}})
	if err != nil || resp.Status != bootstrap.StatusDone {
		t.Fatalf("pull with grants: %v %+v", err, resp)
	}
	for l := range testLayout.NumLayers {
		for i := range 3 {
			if !bytes.Equal(dst.ReadBlock(nil, l, 5+i), src.ReadBlock(nil, l, i)) {
				t.Fatalf("layer %d: decode block %d differs", l, 5+i)
			}
		}
	}

	// A second request's pull grants blocks 2 and 3; its grants are live
	// while the attacks run.
	req := bootstrap.PullRequest{Segment: decTE.Name(), TPRanks: q, LayerAddrs: dec.bases, BlockBytes: dec.layout.BlockBytes(), BlockIDs: []int{2, 3}}
	release, err := dec.mintPullGrants(&req, time.Now().Add(time.Minute))
	if err != nil || len(req.Grants) != 1 {
		t.Fatalf("mint: %v, %d grants", err, len(req.Grants))
	}
	live := string(req.Grants[0])
	old := bytes.Clone(req.Grants[0])
	release()
	req.Grants = nil
	release, err = dec.mintPullGrants(&req, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	live = string(req.Grants[0])

	bb := uint64(dec.layout.BlockBytes())
	block := func(rank, layer, id int) uint64 {
		return dec.bases[rank*testLayout.NumLayers+layer] + uint64(id)*bb
	}
	buf := make([]byte, 2*bb)
	for i := range buf {
		buf[i] = 0xEE
	}
	if err := preTE.RegisterBytes(buf, ""); err != nil {
		t.Fatal(err)
	}
	seg, err := preTE.OpenSegment(ctx, decTE.Name())
	if err != nil {
		t.Fatal(err)
	}
	before := snapshotKV(dst)
	for _, a := range []struct {
		name   string
		remote uint64
		n      uint64
		grant  string
	}{
		{"no grant", block(0, 0, 2), bb, ""},
		// Before the live grant is on these lanes (a lane's verified
		// grants cover every write on it).
		{"released grant replayed", block(0, 0, 2), bb, string(old)},
		{"block not granted", block(0, 0, 4), bb, live},
		{"granted block spilling into the next", block(0, 1, 3), 2 * bb, live},
		{"block of the finished pull", block(0, 0, 5), bb, live},
	} {
		err := preTE.Transfer(ctx, []transfer.Request{{Op: transfer.OpWrite, Local: transfer.AddrOf(buf), Segment: seg, Remote: a.remote, Length: int(a.n), Grant: a.grant}})
		if !errors.Is(err, transfer.ErrDenied) {
			t.Fatalf("%s: err = %v, want ErrDenied", a.name, err)
		}
		after := snapshotKV(dst)
		for i := range before {
			if !bytes.Equal(before[i], after[i]) {
				t.Fatalf("%s: decode block %d of layer %d changed", a.name, i%testLayout.NumBlocks, i/testLayout.NumBlocks)
			}
		}
	}
	// The live grant does what it says, in every rank and layer.
	for r := range q {
		for l := range testLayout.NumLayers {
			if err := preTE.Transfer(ctx, []transfer.Request{{Op: transfer.OpWrite, Local: transfer.AddrOf(buf), Segment: seg, Remote: block(r, l, 2), Length: int(2 * bb), Grant: live}}); err != nil {
				t.Fatalf("rank %d layer %d: granted write: %v", r, l, err)
			}
		}
	}
	// Once released, it is refused on the lanes it was installed on too.
	release()
	err = preTE.Transfer(ctx, []transfer.Request{{Op: transfer.OpWrite, Local: transfer.AddrOf(buf), Segment: seg, Remote: block(0, 0, 2), Length: int(bb), Grant: live}})
	if !errors.Is(err, transfer.ErrDenied) {
		t.Fatalf("after release: %v", err)
	}
	if decTE.GrantStats().Denied < 6 {
		t.Fatalf("decode engine counted %+v", decTE.GrantStats())
	}
}
