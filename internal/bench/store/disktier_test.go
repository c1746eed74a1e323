package store

import (
	"context"
	"testing"
	"time"
)

// TestRunDisk: a small store-disk run measures every figure (offload
// write, both sequential references, gets batched and single, the memory
// path, batched and single) for 1 and 2 clients, and every slice the tier served to the engine was read ahead.
func TestRunDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := RunDisk(ctx, DiskConfig{Dir: t.TempDir(), Size: 200 << 10, Objects: 24, Clients: 2, Batch: 4, Rounds: 1,
		Duration: 50 * time.Millisecond, Transport: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Objects != 24 || res.OffloadGBps <= 0 || res.SeqWriteGBps <= 0 || res.SeqWrite1GBps <= 0 || len(res.Rows) != 2 {
		t.Fatalf("result %+v", res)
	}
	for _, r := range res.Rows {
		if r.BatchGBps <= 0 || r.GetGBps <= 0 || r.SeqGBps <= 0 || r.Seq1GBps <= 0 || r.MemGBps <= 0 || r.MemGetGBps <= 0 {
			t.Fatalf("row %+v: a figure is missing", r)
		}
	}
	if res.ReadCalls == 0 || res.AheadHits != res.ReadCalls {
		t.Fatalf("%d of %d slices served from reads ahead, want all", res.AheadHits, res.ReadCalls)
	}
}
