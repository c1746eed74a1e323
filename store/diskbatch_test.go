package store_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvcache-go/mooncake/internal/disktier"
	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/objheader"
	"github.com/kvcache-go/mooncake/internal/storenode"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// offloadAll evicts the master's objects to the disk tiers until keys
// have no memory copy left, only a disk one.
func offloadAll(t *testing.T, c *cluster, keys []string) {
	t.Helper()
	core := c.master.Core()
	waitfor.Cond(t, 20*time.Second, "every key on disk only", func() bool {
		busy := false
		for _, r := range core.Tombstones() {
			busy = busy || r.Offload
		}
		if busy {
			return false // the node offloads at its next ping
		}
		for _, k := range keys {
			if info, err := core.Query(k); err != nil || len(info.Replicas) != 0 || len(info.Disk) != 1 {
				core.Evict()
				return false
			}
		}
		return true
	})
}

// plainDiskNode is a storage node with a disk tier that offloads on
// evict and does not ask readers to promote (so reads stay on disk).
func plainDiskNode(t *testing.T, c *cluster, dir string) *storenode.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := storenode.Start(ctx, storenode.Config{Master: c.master.Addr(), SegmentSize: 1 << 20, Engine: transfer.Config{Transport: c.transport},
		PingInterval: 20 * time.Millisecond, UnmountGrace: 100 * time.Millisecond,
		RootFSDir: dir, EnableOffload: true, OffloadOnEvict: true, DiskCapacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDiskBatchGet: values offloaded to a node's disk tier are read back
// by one batch get, through the node's transfer engine (its disk tier's
// reads, not its HTTP server), intact; a corrupted file is caught by the
// CRC32C end to end (ErrCorrupt, the other keys still read); a node
// restarted on its directory serves the copies again at their new
// addresses; single gets take the same path.
func TestDiskBatchGet(t *testing.T) {
	for _, tr := range []string{"tcp", ""} {
		name := tr
		if name == "" {
			name = "auto"
		}
		t.Run(name, func(t *testing.T) { diskBatchGet(t, tr) })
	}
}

func diskBatchGet(t *testing.T, transport string) {
	c := newCluster(t, master.Config{Durable: true, HighWatermark: 1, EvictionRatio: 0.5}, 0, 0)
	c.transport = transport
	dir := t.TempDir()
	n := plainDiskNode(t, c, dir)
	cl := c.client(func(cfg *store.Config) { cfg.LocalBufferSize = 4 << 20 })
	ctx := ctxT(t)
	var keys []string
	want := map[string][]byte{}
	for i := range 10 { // 10 values of 20-90 KiB (odd sizes) in a 1 MiB segment
		k := fmt.Sprint("batch/", i)
		want[k] = value(k, 20<<10+i*7<<10+i)
		if err := cl.Put(ctx, k, want[k]); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	offloadAll(t, c, keys)
	info, err := cl.Stat(ctx, keys[0])
	if err != nil || len(info.Disk) != 1 || info.Disk[0].Addr == 0 || info.Disk[0].Endpoint != n.Client().SegmentName() {
		t.Fatalf("stat of a disk copy: %+v %v, want its engine address", info.Disk, err)
	}

	check := func(n *storenode.Node, what string) {
		t.Helper()
		io0, reads0, asked0 := n.DiskTier().IOStats(), cl.DiskReads(), c.master.Core().Stats().DiskGets
		vals, errs := cl.BatchGet(ctx, keys)
		for i, k := range keys {
			if errs[i] != nil || !bytes.Equal(vals[i], want[k]) {
				t.Fatalf("%s: batch get %s: %v", what, k, errs[i])
			}
		}
		if asked := c.master.Core().Stats().DiskGets - asked0; asked != uint64(len(keys)) {
			t.Fatalf("%s: %d disk replica lists asked for %d keys: the batch fell back to single gets", what, asked, len(keys))
		}
		io1 := n.DiskTier().IOStats()
		var total uint64
		for _, v := range want {
			total += uint64(len(v))
		}
		if got := io1.ReadBytes - io0.ReadBytes; got != total || cl.DiskReads()-reads0 != uint64(len(keys)) {
			t.Fatalf("%s: the tier read %d bytes for the engine, want %d; client counted %d disk reads", what, got, total, cl.DiskReads()-reads0)
		}
		got, err := cl.Get(ctx, keys[3])
		if err != nil || !bytes.Equal(got, want[keys[3]]) {
			t.Fatalf("%s: get: %v", what, err)
		}
		if n.DiskTier().IOStats().ReadBytes-io1.ReadBytes != uint64(len(want[keys[3]])) {
			t.Fatalf("%s: single get not read through the engine", what)
		}
	}
	check(n, "first")

	// The node restarts on its directory: its copies get new addresses,
	// which it reports; readers use those.
	n.Close()
	n = plainDiskNode(t, c, dir)
	defer n.Close()
	waitfor.Cond(t, 10*time.Second, "disk copies re-reported", func() bool {
		info, err := cl.Stat(ctx, keys[0])
		return err == nil && len(info.Disk) == 1 && info.Disk[0].Endpoint == n.Client().SegmentName()
	})
	check(n, "after restart")

	// Flip one byte of a value on disk: that key fails with ErrCorrupt (no
	// fallback hides it), the others read.
	bad := keys[5]
	files, _ := filepath.Glob(filepath.Join(dir, "*.obj"))
	flipped := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := objheader.Decode(b); err == nil && h.Key == bad {
			b[len(b)-100] ^= 0xff
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			flipped = true
		}
	}
	if !flipped {
		t.Fatal("no file holds the key to corrupt")
	}
	// Slices the tier read ahead before the flip may still serve the right
	// bytes for a moment; every answer is the right value or ErrCorrupt,
	// and the flip is caught once they are gone.
	waitfor.Cond(t, 10*time.Second, "the corrupted copy caught", func() bool {
		vals, errs := cl.BatchGet(ctx, keys)
		caught := false
		for i, k := range keys {
			switch {
			case k == bad && errors.Is(errs[i], store.ErrCorrupt) && vals[i] == nil:
				caught = true
			case errs[i] != nil || !bytes.Equal(vals[i], want[k]):
				t.Fatalf("batch get %s after the flip: %v", k, errs[i])
			}
		}
		return caught
	})
	if _, err := cl.Get(ctx, bad); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("get of the corrupted disk copy: %v, want ErrCorrupt", err)
	}
}

// TestDiskGetWithGrants: on a pool whose nodes check grants, the master
// grants reads of disk copies as of memory replicas: batch and single
// gets read them through the node's engine; a READ of the same range
// without the grant is refused before the disk is touched.
func TestDiskGetWithGrants(t *testing.T) {
	keys := grantKeys(t)
	c := newGrantCluster(t, master.Config{Durable: true, HighWatermark: 1, EvictionRatio: 0.5}, 0, 0, keys, "tcp")
	ctx := ctxT(t)
	n, err := storenode.Start(ctx, storenode.Config{Master: c.master.Addr(), SegmentSize: 1 << 20,
		Engine:       transfer.Config{Secret: grantTestSecret, Grants: grant.NewVerifier(keys, nil), Transport: "tcp"},
		PingInterval: 20 * time.Millisecond, UnmountGrace: 100 * time.Millisecond,
		RootFSDir: t.TempDir(), EnableOffload: true, OffloadOnEvict: true, DiskCapacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cl := grantClient(c)
	var ks []string
	want := map[string][]byte{}
	for i := range 6 {
		k := fmt.Sprint("g/", i)
		want[k] = value(k, 50<<10+i)
		if err := cl.Put(ctx, k, want[k]); err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
	}
	offloadAll(t, c, ks)
	before := n.DiskTier().IOStats().ReadBytes
	vals, errs := cl.BatchGet(ctx, ks)
	for i, k := range ks {
		if errs[i] != nil || !bytes.Equal(vals[i], want[k]) {
			t.Fatalf("batch get %s: %v", k, errs[i])
		}
	}
	if got, err := cl.Get(ctx, ks[2]); err != nil || !bytes.Equal(got, want[ks[2]]) {
		t.Fatalf("get: %v", err)
	}
	read := n.DiskTier().IOStats().ReadBytes - before
	var total uint64
	for _, v := range want {
		total += uint64(len(v))
	}
	if read != total+uint64(len(want[ks[2]])) {
		t.Fatalf("the tier read %d bytes for the engine, want %d: reads with grants fell back to HTTP", read, total+uint64(len(want[ks[2]])))
	}
	// The same READ with no grant is denied.
	info, err := cl.Stat(ctx, ks[0])
	if err != nil || len(info.Disk) != 1 {
		t.Fatal(info, err)
	}
	eng, err := transfer.Open(ctx, transfer.Config{Secret: grantTestSecret, Transport: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	buf := make([]byte, len(want[ks[0]]))
	if err := eng.RegisterBytes(buf, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	seg, err := eng.OpenSegment(ctx, info.Disk[0].Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	before = n.DiskTier().IOStats().ReadBytes
	err = eng.Transfer(ctx, []transfer.Request{{Op: transfer.OpRead, Local: transfer.AddrOf(buf), Segment: seg, Remote: info.Disk[0].Addr, Length: len(buf)}})
	if !errors.Is(err, transfer.ErrDenied) {
		t.Fatalf("READ of a disk copy with no grant: %v, want ErrDenied", err)
	}
	if n.DiskTier().IOStats().ReadBytes != before {
		t.Fatal("the tier read for a denied READ")
	}

	// Over HTTP (readers without an engine path) the node asks for the
	// same grant: none is refused, another copy's reads as absent, the
	// copy's own reads the value.
	conn, err := grpc.NewClient(c.master.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mc := pb.NewMasterServiceClient(conn)
	disk := func(key string) *pb.DiskCopy {
		r, err := mc.GetReplicaList(ctx, &pb.KeyRequest{Key: key})
		if err != nil || len(r.GetDisk()) != 1 || len(r.Disk[0].Grant) == 0 {
			t.Fatalf("replica list of %s: %v %v", key, err, r.GetStatus())
		}
		return r.Disk[0]
	}
	d0, d1 := disk(ks[0]), disk(ks[1])
	httpGet := func(d *pb.DiskCopy, key string, g []byte) (int, []byte) {
		req, _ := http.NewRequestWithContext(ctx, "GET", d.Url+"/disk/object?key="+url.QueryEscape(key)+"&seq="+fmt.Sprint(d.Seq), nil)
		if g != nil {
			req.Header.Set(disktier.GrantHeader, base64.StdEncoding.EncodeToString(g))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, a := range []struct {
		name string
		g    []byte
		want int
	}{{"no grant", nil, http.StatusForbidden}, {"another copy's grant", d1.Grant, http.StatusNotFound}, {"garbage", []byte("garbage"), http.StatusNotFound}} {
		if code, b := httpGet(d0, ks[0], a.g); code != a.want || bytes.Contains(b, want[ks[0]][:64]) {
			t.Fatalf("HTTP read with %s: %d, want %d", a.name, code, a.want)
		}
	}
	if code, b := httpGet(d0, ks[0], d0.Grant); code != http.StatusOK || !bytes.Equal(b, want[ks[0]]) {
		t.Fatalf("HTTP read with the copy's grant: %d, %d bytes", code, len(b))
	}
}
