package transfer

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// stalledWrite makes a WRITE of n bytes from ini into a fresh buffer of
// tgt time out while tgt's lanes cannot take payloads (every bulk token
// held), so the write's bytes sit in sockets when ini gives up. It returns
// the target buffer and the function that gives the tokens back.
func stalledWrite(t *testing.T, ini, tgt *Engine, seg SegmentID, n int) (remote []byte, thaw func()) {
	t.Helper()
	remote, local := make([]byte, n), make([]byte, n)
	if err := tgt.RegisterBytes(remote, ""); err != nil {
		t.Fatal(err)
	}
	if err := ini.RegisterBytes(local, ""); err != nil {
		t.Fatal(err)
	}
	for i := range local {
		local[i] = byte(i%255 + 1) // no zero: written counts what landed
	}
	for range cap(tgt.bulk) {
		tgt.bulk <- struct{}{}
	}
	thawed := false
	thaw = func() {
		if !thawed {
			thawed = true
			for range cap(tgt.bulk) {
				<-tgt.bulk
			}
		}
	}
	t.Cleanup(thaw)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := ini.Transfer(ctx, []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: n}})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("stalled write: err = %v, want ErrTimeout", err)
	}
	return remote, thaw
}

func written(b []byte) int {
	k := 0
	for _, c := range b {
		if c != 0 {
			k++
		}
	}
	return k
}

func inboundLanes(e *Engine) int {
	e.connMu.Lock()
	defer e.connMu.Unlock()
	return len(e.lanes)
}

// A write that timed out can still land afterwards: its bytes wait in the
// target's socket buffer until the lane reads them. This is the hazard
// FenceFrom exists for; if it ever stops happening, the fence test below
// proves nothing and must be redesigned.
func TestTimedOutWriteLandsLateWithoutFence(t *testing.T) {
	ini, tgt, seg := pair(t, TransportTCP, nil)
	remote, thaw := stalledWrite(t, ini, tgt, seg, 32<<20)
	if k := written(remote); k != 0 {
		t.Fatalf("%d bytes written while the lanes were stalled", k)
	}
	thaw()
	// Closing the initiator resets its lanes; the target's end once they
	// have applied what they had received.
	if err := ini.Close(); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 10*time.Second, "the target's lanes to end", func() bool { return inboundLanes(tgt) == 0 })
	k := written(remote)
	if k == 0 {
		t.Fatal("no byte of the timed-out write landed after it failed: the hazard this test documents is gone")
	}
	t.Logf("%d bytes of a write that had failed landed afterwards", k)
}

// After FenceFrom returns, nothing the fenced peer sent before lands; the
// peer's next transfer opens new lanes and works.
func TestFenceFromStopsLateWrites(t *testing.T) {
	ini, tgt, seg := pair(t, TransportTCP, nil)
	remote, thaw := stalledWrite(t, ini, tgt, seg, 32<<20)
	if k := written(remote); k != 0 {
		t.Fatalf("%d bytes written while the lanes were stalled", k)
	}
	if inboundLanes(tgt) == 0 {
		t.Fatal("no inbound lane to fence")
	}
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := tgt.FenceFrom(ctx, ini.Name())
		done <- res{n, err}
	}()
	// A lane waiting for a bulk token finishes only once it gets one: the
	// fence waits for it (closed, it reads nothing more).
	thaw()
	r := <-done
	if r.err != nil || r.n == 0 {
		t.Fatalf("FenceFrom = %d, %v", r.n, r.err)
	}
	// Bytes a lane had buffered may land during the call (into memory the
	// caller still owns), none after it.
	snap := append([]byte(nil), remote...)
	local := make([]byte, 1<<20)
	if err := ini.RegisterBytes(local, ""); err != nil {
		t.Fatal(err)
	}
	fill(local, 11)
	if err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: len(local)}}); err != nil {
		t.Fatalf("write after the fence: %v", err)
	}
	if !bytes.Equal(remote[:len(local)], local) {
		t.Fatal("the write after the fence did not land")
	}
	if !bytes.Equal(remote[len(local):], snap[len(local):]) {
		t.Fatal("bytes of the failed write landed after the fence returned")
	}
}

// FenceFrom ends only the named peer's lanes.
func TestFenceFromSparesOtherPeers(t *testing.T) {
	ini, tgt, seg := pair(t, TransportTCP, nil)
	other := openEngine(t, Config{Transport: TransportTCP})
	oseg, err := other.OpenSegment(ctxT(t), tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	remote, a, b := make([]byte, 1<<20), make([]byte, 1<<20), make([]byte, 1<<20)
	_ = tgt.RegisterBytes(remote, "")
	_ = ini.RegisterBytes(a, "")
	_ = other.RegisterBytes(b, "")
	for _, x := range []struct {
		e   *Engine
		seg SegmentID
		buf []byte
	}{{ini, seg, a}, {other, oseg, b}} {
		if err := x.e.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(x.buf), Segment: x.seg, Remote: uint64(AddrOf(remote)), Length: len(x.buf)}}); err != nil {
			t.Fatal(err)
		}
	}
	before := inboundLanes(tgt)
	n, err := tgt.FenceFrom(ctxT(t), ini.Name())
	if err != nil || n == 0 || n >= before {
		t.Fatalf("FenceFrom = %d, %v with %d lanes open", n, err, before)
	}
	if got := inboundLanes(tgt); got != before-n {
		t.Fatalf("%d lanes left, want %d", got, before-n)
	}
}
