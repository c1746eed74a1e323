package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// newTenantGrantCluster: tenants (tenantPolicy) and data-path grants, one
// storage node holding the cluster secret and checking grants; noScrub
// turns the master's scrubbing off (what the tests show it prevents).
func newTenantGrantCluster(t testing.TB, core master.Config, segSize uint64, noScrub bool) *cluster {
	t.Helper()
	src, _ := tenantSource(t)
	return newGrantClusterWith(t, masterserver.ServerConfig{Core: core, Secret: clusterSecret, Tenants: src, NoScrub: noScrub},
		1, segSize, grantKeys(t), "")
}

// rawTenant is a tenant's raw view: the master's gRPC service with its
// token, and a transfer engine holding the cluster's engine secret.
type rawTenant struct {
	t   *testing.T
	mc  pb.MasterServiceClient
	ctx context.Context
	eng *transfer.Engine
	sid transfer.SegmentID
}

func newRawTenant(t *testing.T, c *cluster, token string) *rawTenant {
	t.Helper()
	conn, err := grpc.NewClient(c.master.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+token)
	eng, err := transfer.Open(ctx, transfer.Config{Secret: grantTestSecret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	sid, err := eng.OpenSegment(ctx, c.nodes[0].Name())
	if err != nil {
		t.Fatal(err)
	}
	return &rawTenant{t: t, mc: pb.NewMasterServiceClient(conn), ctx: ctx, eng: eng, sid: sid}
}

// putNoWrite starts a put of size bytes and commits it without writing
// anything: the object's replica (with its READ grant). ok is false when
// the pool had no room (or evicted it at once).
func (r *rawTenant) putNoWrite(key string, size uint64) (rep *pb.Replica, ok bool) {
	r.t.Helper()
	ps, err := r.mc.PutStart(r.ctx, &pb.PutStartRequest{ClientId: "raw", Key: key, Size: size})
	if err != nil {
		r.t.Fatal(err)
	}
	if ps.Status.GetCode() != 0 {
		if c := ps.Status.GetCode(); c != master.Code(master.ErrNoSpace) {
			r.t.Fatalf("put start %s: %v", key, ps.Status)
		}
		return nil, false
	}
	if pc, err := r.mc.PutCommit(r.ctx, &pb.PutCommitRequest{ClientId: "raw", Key: key}); err != nil || pc.Status.GetCode() != 0 {
		r.t.Fatalf("put commit %s: %v %v", key, err, pc.GetStatus())
	}
	return r.replica(key)
}

// replica is key's one replica (with its READ grant); ok is false when
// the key is not there (evicted already: the pool is full).
func (r *rawTenant) replica(key string) (rep *pb.Replica, ok bool) {
	r.t.Helper()
	gl, err := r.mc.GetReplicaList(r.ctx, &pb.KeyRequest{Key: key})
	if err == nil && gl.Status.GetCode() == master.Code(master.ErrObjectNotFound) {
		return nil, false
	}
	if err != nil || gl.Status.GetCode() != 0 || len(gl.Replicas) != 1 {
		r.t.Fatalf("replica list of %s: %v %v", key, err, gl.GetStatus())
	}
	return gl.Replicas[0], true
}

// read reads a replica with its grant.
func (r *rawTenant) read(rep *pb.Replica) []byte {
	r.t.Helper()
	buf := make([]byte, rep.Size)
	if err := r.eng.RegisterBytes(buf, ""); err != nil {
		r.t.Fatal(err)
	}
	if err := r.eng.Transfer(r.ctx, []transfer.Request{{Op: transfer.OpRead, Local: transfer.AddrOf(buf), Segment: r.sid,
		Remote: rep.Addr, Length: len(buf), Grant: string(rep.Grant)}}); err != nil {
		r.t.Fatalf("read own object: %v", err)
	}
	return buf
}

// TestGrantsScrubFreedExtents: tenant a puts a secret and removes it;
// tenant b, whose client holds the engine secret, starts puts of the same
// size and commits them without writing until one is placed where the
// secret was, and reads that object with the READ grant the master hands
// it. It reads zeros: the master handed the extent out only after the node
// zeroed it. With scrubbing off the same steps read the secret (the test's
// own check that the attack is real).
func TestGrantsScrubFreedExtents(t *testing.T) {
	for _, v := range []struct{ durable, noScrub bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		noScrub := v.noScrub
		t.Run(fmt.Sprintf("durable=%v/scrub=%v", v.durable, !noScrub), func(t *testing.T) {
			// A short PutTimeout and lease: the secret's extent goes to
			// another tenant only once its put's write grant and its read
			// lease ended (TestGrantsScrubHolds*).
			c := newTenantGrantCluster(t, master.Config{Durable: v.durable, PutTimeout: 2 * time.Second, LeaseTTL: 2 * time.Second}, 32<<20, noScrub)
			const size = 64 << 10
			secret := value("secret", size)
			a, b := newRawTenant(t, c, "token-a-first"), newRawTenant(t, c, "token-b-first")
			victim := grantTenantClient(c, "token-a-first")
			ctx := ctxT(t)
			if err := victim.Put(ctx, "secret", secret); err != nil {
				t.Fatal(err)
			}
			rep, ok := a.replica("secret")
			if !ok {
				t.Fatal("the secret is not there")
			}
			at := rep.Addr
			if err := victim.Remove(ctx, "secret", true); err != nil {
				t.Fatal(err)
			}
			got, was := probeOver(t, c, b, at, secret, v.durable)
			leaked := bytes.Equal(got, was)
			if noScrub {
				if !leaked {
					t.Fatal("without scrubbing the probe did not read the secret: the test shows nothing")
				}
				return
			}
			if leaked || bytes.Count(got, []byte{0}) != len(got) {
				t.Fatalf("tenant b read %d non-zero bytes of a freed extent (the secret: %v)", len(got)-bytes.Count(got, []byte{0}), leaked)
			}
		})
	}
}

// probeOver has tenant b start puts of the secret's size (64 bytes less
// for durable objects: the secret's header may stay a tombstone until
// zeroed) and commit them without writing, until one's value overlaps the
// secret's (at, in the node's memory), and returns what b read there with
// its READ grant and the secret's bytes there.
func probeOver(t *testing.T, c *cluster, b *rawTenant, at uint64, secret []byte, durable bool) (got, was []byte) {
	t.Helper()
	probe := uint64(len(secret))
	if durable {
		probe -= 64
	}
	for i := 0; got == nil; i++ {
		if b.ctx.Err() != nil {
			t.Fatal("no put of tenant b was placed over the secret")
		}
		rep, ok := b.putNoWrite(fmt.Sprintf("probe-%d", i), probe)
		if !ok {
			waitfor.Cond(t, 10*time.Second, "room", func() bool { return c.master.Core().DirtyBytes() == 0 })
			continue
		}
		lo, hi := max(rep.Addr, at), min(rep.Addr+rep.Size, at+uint64(len(secret)))
		if lo < hi {
			t.Logf("probe %d overlaps the secret's value at [%d, %d) of it", i, lo-at, hi-at)
			got, was = b.read(rep)[lo-rep.Addr:hi-rep.Addr], secret[lo-at:hi-at]
		}
	}
	return got, was
}

// TestGrantsScrubRemount: a node's memory outlives the master that knew
// its objects. Secrets are removed on a master that does not scrub, then
// the master restarts with scrubbing: without durable metadata the
// remounted segment is all dirty, with it the space between and past the
// restored objects is; either way tenant b's puts over the old secret read
// zeros, and the restored object still reads back.
func TestGrantsScrubRemount(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			// Short: a remounted segment's free memory is held while grants
			// the old master signed may live.
			c := newTenantGrantCluster(t, master.Config{Durable: durable, PutTimeout: time.Second, LeaseTTL: 2 * time.Second}, 32<<20, true)
			const size = 64 << 10
			secret, keep := value("secret", size), value("keep", size)
			a := newRawTenant(t, c, "token-a-first")
			victim := grantTenantClient(c, "token-a-first")
			ctx := ctxT(t)
			for k, v := range map[string][]byte{"secret": secret, "keep": keep} {
				if err := victim.Put(ctx, k, v); err != nil {
					t.Fatal(err)
				}
			}
			rep, ok := a.replica("secret")
			if !ok {
				t.Fatal("the secret is not there")
			}
			at := rep.Addr
			if err := victim.Remove(ctx, "secret", true); err != nil {
				t.Fatal(err)
			}
			c.mcfg.NoScrub = false
			c.restartMaster()
			node := c.nodes[0].Client()
			waitfor.Cond(t, 10*time.Second, "the node remounted", func() bool { return node.Remounts() > 0 })
			if durable {
				waitfor.Cond(t, 10*time.Second, "the kept object restored", func() bool {
					v, err := victim.Get(ctx, "keep")
					return err == nil && bytes.Equal(v, keep)
				})
			}
			b := newRawTenant(t, c, "token-b-first")
			got, was := probeOver(t, c, b, at, secret, durable)
			if bytes.Equal(got, was) || bytes.Count(got, []byte{0}) != len(got) {
				t.Fatalf("tenant b read %d non-zero bytes of the old secret's extent", len(got)-bytes.Count(got, []byte{0}))
			}
		})
	}
}

// grantTenantClient is a store client of the tenant of token whose engine
// holds the cluster's engine secret.
func grantTenantClient(c *cluster, token string) *store.Client {
	return c.client(func(cfg *store.Config) {
		cfg.Token = token
		eng, err := transfer.Open(context.Background(), transfer.Config{Secret: grantTestSecret})
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { eng.Close() })
		cfg.Mover = eng
	})
}

// TestGrantsScrubChurn: two tenants put and read keys of a pool too small
// for them at once (every put evicts), with scrubbing: extents change
// owner through zeroing all the time, and no value reads back other than
// as written (an extent zeroed after it was handed out again would read
// back as a checksum mismatch).
func TestGrantsScrubChurn(t *testing.T) {
	c := newTenantGrantCluster(t, master.Config{}, 1<<20, false)
	ctx := ctxT(t)
	const size, keys = 16 << 10, 96 // 64 objects fit the pool
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, tok := range []string{"token-b-first", "token-ops-first"} {
		cl := grantTenantClient(c, tok)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(len(tok)), 1))
			deadline := time.Now().Add(2 * time.Second)
			for i := 0; time.Now().Before(deadline); i++ {
				k := fmt.Sprintf("%s/%d", tok, r.IntN(keys))
				if r.IntN(2) == 0 {
					if err := cl.PutWith(ctx, k, value(k, size), store.PutOptions{Upsert: true}); err != nil && !errors.Is(err, store.ErrNoSpace) {
						errs <- fmt.Errorf("put %s: %w", k, err)
						return
					}
					continue
				}
				got, err := cl.Get(ctx, k)
				switch {
				case errors.Is(err, store.ErrNotFound):
				case err != nil:
					errs <- fmt.Errorf("get %s: %w", k, err)
					return
				case !bytes.Equal(got, value(k, size)):
					errs <- fmt.Errorf("get %s: wrong bytes", k)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := c.master.Core().Stats()
	t.Logf("evictions %d, scrubbing now %d bytes", st.Evictions, st.Scrubbing)
	if st.Evictions == 0 {
		t.Fatal("nothing was evicted: the test churned nothing")
	}
}

// TestGrantsScrubHoldsWriteGrant: tenant a starts a put, so it holds the
// master's WRITE grant on the extent, commits and removes the object;
// tenant b's puts (which write b's bytes) run until one is placed over
// that extent; then a writes there with its old grant. With scrubbing the
// extent reached b only after a's grant expired: the node refuses the
// write and b's object reads back as b wrote it. Without, the write lands
// in b's object (the test's own check that the attack is real).
func TestGrantsScrubHoldsWriteGrant(t *testing.T) {
	for _, noScrub := range []bool{false, true} {
		t.Run(fmt.Sprintf("scrub=%v", !noScrub), func(t *testing.T) {
			c := newTenantGrantCluster(t, master.Config{PutTimeout: 2 * time.Second}, 256<<10, noScrub)
			const size = 64 << 10
			a, b := newRawTenant(t, c, "token-a-first"), newRawTenant(t, c, "token-b-first")
			ps, err := a.mc.PutStart(a.ctx, &pb.PutStartRequest{ClientId: "raw-a", Key: "w", Size: size})
			if err != nil || ps.Status.GetCode() != 0 || len(ps.Replicas) != 1 || len(ps.Replicas[0].Grant) == 0 {
				t.Fatalf("a's put start: %v %v", err, ps.GetStatus())
			}
			held := ps.Replicas[0]
			if pc, err := a.mc.PutCommit(a.ctx, &pb.PutCommitRequest{ClientId: "raw-a", Key: "w"}); err != nil || pc.Status.GetCode() != 0 {
				t.Fatalf("a's commit: %v %v", err, pc.GetStatus())
			}
			if rm, err := a.mc.Remove(a.ctx, &pb.RemoveRequest{Key: "w"}); err != nil || rm.Status.GetCode() != 0 {
				t.Fatalf("a's remove: %v %v", err, rm.GetStatus())
			}
			mine, want := b.putOver(c, held.Addr, size)
			evil := bytes.Repeat([]byte{0xEE}, size)
			if err := a.eng.RegisterBytes(evil, ""); err != nil {
				t.Fatal(err)
			}
			werr := a.eng.Transfer(a.ctx, []transfer.Request{{Op: transfer.OpWrite, Local: transfer.AddrOf(evil), Segment: a.sid,
				Remote: held.Addr - ps.HeaderLen, Length: size, Grant: string(held.Grant)}})
			got := b.read(mine)
			if noScrub {
				if werr != nil || bytes.Equal(got, want) {
					t.Fatalf("without scrubbing a's old grant did not write into b's object (%v): the test shows nothing", werr)
				}
				return
			}
			if werr == nil {
				t.Fatal("a wrote into b's object with the grant of its removed put")
			}
			if !bytes.Equal(got, want) {
				t.Fatal("b's object changed")
			}
		})
	}
}

// putOver puts values of size bytes, written, under new keys until one is
// placed at addr (waiting for room when the pool has none), and returns
// that replica and its value.
func (r *rawTenant) putOver(c *cluster, addr uint64, size int) (*pb.Replica, []byte) {
	r.t.Helper()
	for i := 0; ; i++ {
		if r.ctx.Err() != nil {
			r.t.Fatalf("no put was placed at %d", addr)
		}
		key := fmt.Sprintf("b-%d", i)
		rep, ok := r.putWritten(key, value(key, size))
		if !ok {
			waitfor.Cond(r.t, 10*time.Second, "room", func() bool { return c.master.Core().DirtyBytes() == 0 })
			continue
		}
		if rep.Addr == addr {
			return rep, value(key, size)
		}
	}
}

// putWritten puts data under key, writing it with the put's grant; ok is
// false when the pool had no room.
func (r *rawTenant) putWritten(key string, data []byte) (rep *pb.Replica, ok bool) {
	r.t.Helper()
	ps, err := r.mc.PutStart(r.ctx, &pb.PutStartRequest{ClientId: "raw", Key: key, Size: uint64(len(data))})
	if err != nil {
		r.t.Fatal(err)
	}
	if c := ps.Status.GetCode(); c != 0 {
		if c != master.Code(master.ErrNoSpace) {
			r.t.Fatalf("put start %s: %v", key, ps.Status)
		}
		return nil, false
	}
	if ps.HeaderLen != 0 {
		r.t.Fatalf("put start %s: a %d-byte header (durable metadata): not written here", key, ps.HeaderLen)
	}
	p := ps.Replicas[0]
	if err := r.eng.RegisterBytes(data, ""); err != nil {
		r.t.Fatal(err)
	}
	if err := r.eng.Transfer(r.ctx, []transfer.Request{{Op: transfer.OpWrite, Local: transfer.AddrOf(data), Segment: r.sid,
		Remote: p.Addr, Length: len(data), Grant: string(p.Grant)}}); err != nil {
		r.t.Fatalf("write %s: %v", key, err)
	}
	if pc, err := r.mc.PutCommit(r.ctx, &pb.PutCommitRequest{ClientId: "raw", Key: key}); err != nil || pc.Status.GetCode() != 0 {
		r.t.Fatalf("put commit %s: %v %v", key, err, pc.GetStatus())
	}
	return r.replica(key)
}

// TestGrantsScrubHoldsReadGrant: tenant a gets its object's replica list
// (a READ grant to the end of the read lease) and removes the object by
// force, which does not wait for the lease; tenant b's puts run until one
// is placed over that extent; then a reads there with its old grant. With
// scrubbing the extent reached b only after a's grant expired: the node
// refuses the read. Without, a reads b's bytes (the test's own check that
// the attack is real).
func TestGrantsScrubHoldsReadGrant(t *testing.T) {
	for _, noScrub := range []bool{false, true} {
		t.Run(fmt.Sprintf("scrub=%v", !noScrub), func(t *testing.T) {
			c := newTenantGrantCluster(t, master.Config{PutTimeout: time.Second, LeaseTTL: 4 * time.Second}, 256<<10, noScrub)
			const size = 64 << 10
			a, b := newRawTenant(t, c, "token-a-first"), newRawTenant(t, c, "token-b-first")
			if _, ok := a.putWritten("r", value("r", size)); !ok {
				t.Fatal("no room for a's object")
			}
			// The lease's READ grant outlives the put's WRITE grant: a
			// later get renews it past the put's hold.
			rep, ok := a.replica("r")
			if !ok || len(rep.Grant) == 0 {
				t.Fatal("a's replica list has no grant")
			}
			if rm, err := a.mc.Remove(a.ctx, &pb.RemoveRequest{Key: "r", Force: true}); err != nil || rm.Status.GetCode() != 0 {
				t.Fatalf("a's forced remove: %v %v", err, rm.GetStatus())
			}
			_, want := b.putOver(c, rep.Addr, size)
			buf := make([]byte, size)
			if err := a.eng.RegisterBytes(buf, ""); err != nil {
				t.Fatal(err)
			}
			rerr := a.eng.Transfer(a.ctx, []transfer.Request{{Op: transfer.OpRead, Local: transfer.AddrOf(buf), Segment: a.sid,
				Remote: rep.Addr, Length: size, Grant: string(rep.Grant)}})
			if noScrub {
				if rerr != nil || !bytes.Equal(buf, want) {
					t.Fatalf("without scrubbing a's old grant did not read b's object (%v): the test shows nothing", rerr)
				}
				return
			}
			if rerr == nil {
				t.Fatalf("a read b's object with the grant of its removed one (b's bytes: %v)", bytes.Equal(buf, want))
			}
		})
	}
}

// TestGrantsScrubHeldQuota: tenant a (quota 256 KB) puts and removes
// objects of ever new sizes as fast as it can, so every extent it frees
// is held (its put's write grant lives) and none is the size its next put
// would take back; held bytes count against its quota, so its puts are
// refused (quota exceeded) before it holds more than that, and tenant b's
// puts still find the rest of the pool. Without the charge a's held space
// grew past its quota until the pool was full and b's puts failed.
func TestGrantsScrubHeldQuota(t *testing.T) {
	c := newTenantGrantCluster(t, master.Config{}, 1<<20, false)
	ctx := ctxT(t)
	a, b := grantTenantClient(c, "token-a-first"), grantTenantClient(c, "token-b-first")
	refused := 0
	for i := range 48 {
		k := fmt.Sprint("churn-", i)
		err := a.Put(ctx, k, value(k, 24<<10+i*1024))
		if errors.Is(err, store.ErrQuotaExceeded) {
			refused++
			continue
		}
		if err != nil {
			t.Fatalf("a's put %d: %v", i, err)
		}
		if err := a.Remove(ctx, k, false); err != nil {
			t.Fatal(err)
		}
	}
	st := c.master.Core().Stats()
	t.Logf("a refused %d of 48; held %d bytes", refused, st.ScrubHeld)
	if refused == 0 {
		t.Fatal("a's churn never hit its quota: the test held nothing")
	}
	if st.ScrubHeld > 256_000+64<<10 {
		t.Fatalf("%d bytes held, past a's quota", st.ScrubHeld)
	}
	for i := range 8 { // 512 KiB: the pool less a's quota (its extents scattered) holds it
		k := fmt.Sprint("b-", i)
		if err := b.Put(ctx, k, value(k, 64<<10)); err != nil {
			t.Fatalf("b's put %d with a's churn held: %v", i, err)
		}
		if got, err := b.Get(ctx, k); err != nil || !bytes.Equal(got, value(k, 64<<10)) {
			t.Fatalf("b's get %d: %v", i, err)
		}
	}
}
