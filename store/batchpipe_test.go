package store

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/transfer"
)

// transferOnly hides a Mover's Submit.
type transferOnly struct{ Mover }

// TestTransferChecked: a large batch of reads is run in groups of about
// pipeGroup bytes, every request reported exactly once, in order, with
// the error of the transfer that carried it: a group with a bad request
// fails alone, the others' bytes arrive; a small batch, or a Mover
// without Submit, is one transfer (all requests share its outcome).
func TestTransferChecked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ini, err := transfer.Open(ctx, transfer.Config{Transport: transfer.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	defer ini.Close()
	tgt, err := transfer.Open(ctx, transfer.Config{Transport: transfer.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	const size, n = 700 << 10, 9 // 6.2 MiB: groups of 3 values (2.05 MiB)
	src := make([]byte, size*n)
	for i := range src {
		src[i] = byte(i*7 + i>>12)
	}
	if err := tgt.RegisterBytes(src, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, size*n)
	if err := ini.RegisterBytes(dst, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	seg, err := ini.OpenSegment(ctx, tgt.Name())
	if err != nil {
		t.Fatal(err)
	}
	reqs := func(bad int) []transfer.Request {
		var rs []transfer.Request
		for i := range n {
			r := transfer.Request{Op: transfer.OpRead, Local: transfer.AddrOf(dst[i*size:]), Segment: seg, Remote: uint64(transfer.AddrOf(src[i*size:])), Length: size}
			if i == bad {
				r.Remote = uint64(transfer.AddrOf(src)) + uint64(len(src)) - 100 // runs past the registered buffer
			}
			rs = append(rs, r)
		}
		return rs
	}
	run := func(m Mover, rs []transfer.Request) []error {
		clear(dst)
		c := &Client{mover: m}
		var got []int
		errs := make([]error, len(rs))
		c.transferChecked(ctx, rs, func(k int, err error) {
			got = append(got, k)
			errs[k] = err
		})
		for k := range rs {
			if len(got) != len(rs) || got[k] != k {
				t.Fatalf("reported %v, want every request once, in order", got)
			}
		}
		return errs
	}
	errs := run(ini, reqs(4))
	for k, err := range errs {
		if (err != nil) != (k >= 3 && k < 6) {
			t.Fatalf("request %d: %v (want an error for the group of request 4 only)", k, err)
		}
		if err == nil && !bytes.Equal(dst[k*size:(k+1)*size], src[k*size:(k+1)*size]) {
			t.Fatalf("request %d: wrong bytes", k)
		}
	}
	for _, m := range []Mover{transferOnly{ini}, ini} {
		rs := reqs(4)
		if _, ok := m.(submitter); ok {
			rs = rs[3:6] // 2.05 MiB: one transfer
		}
		for k, err := range run(m, rs) {
			if err == nil {
				t.Fatalf("%T: request %d succeeded in the transfer that failed", m, k)
			}
		}
	}
	for k, err := range run(ini, reqs(-1)) {
		if err != nil || !bytes.Equal(dst[k*size:(k+1)*size], src[k*size:(k+1)*size]) {
			t.Fatalf("request %d: %v", k, err)
		}
	}
}
