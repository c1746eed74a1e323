package store

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/transfer"
)

// TestTransferChecked: every request is reported exactly once, in order,
// with the outcome of the one transfer that carried them all.
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
	const size, n = 700 << 10, 9
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
	run := func(rs []transfer.Request) []error {
		clear(dst)
		c := &Client{mover: ini}
		var got []int
		errs := make([]error, len(rs))
		c.transferChecked(ctx, rs, func(k int, err error) {
			got = append(got, k)
			errs[k] = err
		})
		if len(got) != len(rs) {
			t.Fatalf("reported %v, want every request once, in order", got)
		}
		for k := range rs {
			if got[k] != k {
				t.Fatalf("reported %v, want every request once, in order", got)
			}
		}
		return errs
	}
	for k, err := range run(reqs(4)) {
		if err == nil {
			t.Fatalf("request %d succeeded in the transfer that failed", k)
		}
	}
	for k, err := range run(reqs(-1)) {
		if err != nil || !bytes.Equal(dst[k*size:(k+1)*size], src[k*size:(k+1)*size]) {
			t.Fatalf("request %d: %v", k, err)
		}
	}
}
