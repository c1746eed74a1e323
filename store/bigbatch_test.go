package store_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/store"
)

// TestBatchAboveMessageLimit: batches whose keys alone pass gRPC's 4 MiB
// message limit (6,000 keys of ~1 KiB) put, read, test and remove every key:
// the client splits them into spans one master call carries.
func TestBatchAboveMessageLimit(t *testing.T) {
	c := newCluster(t, master.Config{}, 1, 64<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	const n = 6000
	pad := strings.Repeat("k", 1000)
	keys := make([]string, n)
	vals := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%05d", pad, i)
		vals[i] = []byte(fmt.Sprintf("v%05d", i))
	}
	for i, err := range cl.BatchPut(ctx, keys, vals, store.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	got, errs := cl.BatchGet(ctx, keys)
	for i := range keys {
		if errs[i] != nil || string(got[i]) != string(vals[i]) {
			t.Fatalf("get %d: %q %v", i, got[i], errs[i])
		}
	}
	ex, err := cl.BatchExist(ctx, keys)
	if err != nil || len(ex) != n {
		t.Fatalf("exist: %d answers, %v", len(ex), err)
	}
	for i, e := range ex {
		if !e {
			t.Fatalf("key %d missing", i)
		}
	}
	for i, err := range cl.BatchRemove(ctx, keys, true) {
		if err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
	}
	if ex, err := cl.BatchExist(ctx, keys); err != nil || ex[0] || ex[n-1] {
		t.Fatalf("after remove: first %v last %v %v", ex[0], ex[n-1], err)
	}
}

// TestCloseLeaves: a closing client, pure or contributing a segment, is
// forgotten by the master at once (not dropped after its TTL).
func TestCloseLeaves(t *testing.T) {
	c := newCluster(t, master.Config{}, 1, 4<<20)
	before := c.master.Core().Stats().Clients
	cl := c.client(nil)
	if n := c.master.Core().Stats().Clients; n != before+1 {
		t.Fatalf("%d clients after a new one, want %d", n, before+1)
	}
	cl.Close()
	if n := c.master.Core().Stats().Clients; n != before {
		t.Fatalf("%d clients after Close, want %d", n, before)
	}
	c.nodes[0].Close()
	if st := c.master.Core().Stats(); st.Clients != before-1 || st.ClientsDropped != 0 || st.Segments != 0 {
		t.Fatalf("after the node's Close: %+v", st)
	}
}
