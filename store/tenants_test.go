package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

const clusterSecret = "cluster-secret-1"

// tenantPolicy: tenant a with a 256 KiB quota, b without one, ops admin.
const tenantPolicy = `version: 1
tenants:
  - name: a
    quota: 256KB
    tokens: [{token: token-a-first}]
  - name: b
    tokens: [{token: token-b-first}]
  - name: ops
    admin: true
    tokens: [{token: token-ops-first}]
`

// tenantCluster is a cluster with tenants on: the policy in a file the
// test may rewrite (reload with src.Reload), storage nodes holding the
// cluster secret.
type tenantCluster struct {
	*cluster
	src    *tenant.Source
	policy string
}

// tenantSource writes tenantPolicy to a file and loads it: the source and
// the file's path.
func tenantSource(t testing.TB) (*tenant.Source, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(path, []byte(tenantPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := tenant.NewSource(context.Background(), tenant.SourceConfig{Load: tenant.FileLoader(path)})
	if err != nil {
		t.Fatal(err)
	}
	return src, path
}

func newTenantCluster(t testing.TB, core master.Config, nodes int, segSize uint64) *tenantCluster {
	t.Helper()
	src, path := tenantSource(t)
	var err error
	c := &cluster{t: t, mcfg: masterserver.ServerConfig{Core: core, Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond,
		Secret: clusterSecret, Tenants: src}}
	c.master, err = masterserver.Start(c.mcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.master.Close() })
	for range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := storenode.Start(ctx, storenode.Config{Master: c.master.Addr(), Secret: clusterSecret, SegmentSize: segSize,
			PingInterval: 20 * time.Millisecond, UnmountGrace: 200 * time.Millisecond})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
		t.Cleanup(func() { n.Close() })
	}
	return &tenantCluster{cluster: c, src: src, policy: path}
}

func (c *tenantCluster) rewrite(t *testing.T, policy string) {
	t.Helper()
	if err := os.WriteFile(c.policy, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := c.src.Reload(context.Background()); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
}

func (c *tenantCluster) tenantClient(token string) *store.Client {
	return c.client(func(cfg *store.Config) { cfg.Token = token })
}

func listKeys(t *testing.T, cl *store.Client) []string {
	t.Helper()
	ks, _, err := cl.List(ctxT(t), "", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.Key
	}
	return out
}

// TestTenantsIsolation: two tenants with valid credentials (and the
// storage nodes' transfer engine) cannot see, read, list, count or remove
// each other's keys, the same key name is two objects, and the admin sees
// the raw key space.
func TestTenantsIsolation(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			c := newTenantCluster(t, master.Config{Durable: durable}, 1, 4<<20)
			ctx := ctxT(t)
			a, b := c.tenantClient("token-a-first"), c.tenantClient("token-b-first")
			admin := c.client(func(cfg *store.Config) { cfg.Secret = clusterSecret })

			va, vb := value("a", 4096), value("b", 4096)
			for _, k := range []string{"same/key", "a-secret/1", "a-secret/2"} {
				if err := a.Put(ctx, k, va); err != nil {
					t.Fatalf("a put %s: %v", k, err)
				}
			}
			if err := b.Put(ctx, "same/key", vb); err != nil {
				t.Fatalf("b put of a key a also has: %v", err)
			}
			if err := b.PutWith(ctx, "b-own", vb, store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if got, err := a.Get(ctx, "same/key"); err != nil || !bytes.Equal(got, va) {
				t.Fatalf("a reads its same/key: %v", err)
			}
			if got, err := b.Get(ctx, "same/key"); err != nil || !bytes.Equal(got, vb) {
				t.Fatalf("b reads its same/key: %v", err)
			}
			// b probes a's keys every way it can.
			if _, err := b.Get(ctx, "a-secret/1"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("b get of a's key: %v", err)
			}
			if ok, err := b.Exist(ctx, "a-secret/1"); ok || err != nil {
				t.Fatalf("b exist of a's key: %v %v", ok, err)
			}
			if oks, err := b.BatchExist(ctx, []string{"a-secret/1", "a-secret/2", "b-own"}); err != nil || oks[0] || oks[1] || !oks[2] {
				t.Fatalf("b batch exist: %v %v", oks, err)
			}
			if _, err := b.Stat(ctx, "a-secret/2"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("b stat of a's key: %v", err)
			}
			if got := listKeys(t, b); strings.Join(got, ",") != "b-own,same/key" {
				t.Fatalf("b lists %q", got)
			}
			// Keys that spell another namespace are just keys of b's.
			if _, err := b.Get(ctx, tenant.Namespace("a")+"a-secret/1"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("b get through a spelt namespace: %v", err)
			}
			if err := b.Remove(ctx, "a-secret/1", true); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("b remove of a's key: %v", err)
			}
			if n, err := b.RemoveByRegex(ctx, "^a-secret/.*", true); err != nil || n != 0 {
				t.Fatalf("b regex removal of a's keys: %d %v", n, err)
			}
			if n, err := b.RemoveByRegex(ctx, ".*", true); err != nil || n != 2 {
				t.Fatalf("b regex removal of everything: %d %v", n, err)
			}
			if got := listKeys(t, a); strings.Join(got, ",") != "a-secret/1,a-secret/2,same/key" {
				t.Fatalf("after b's removals a lists %q", got)
			}
			if err := b.Put(ctx, "b-again", vb); err != nil {
				t.Fatal(err)
			}
			if n, err := b.RemoveAll(ctx, true); err != nil || n != 1 {
				t.Fatalf("b remove all: %d %v", n, err)
			}
			for _, k := range []string{"a-secret/1", "a-secret/2", "same/key"} {
				if got, err := a.Get(ctx, k); err != nil || !bytes.Equal(got, va) {
					t.Fatalf("a's %s after b's remove all: %v", k, err)
				}
			}
			// The admin sees the raw key space, namespaces included, and
			// removes across tenants.
			all := listKeys(t, admin)
			if len(all) != 3 || !strings.HasPrefix(all[0], tenant.Namespace("a")) {
				t.Fatalf("admin lists %q", all)
			}
			if n, err := admin.RemoveAll(ctx, true); err != nil || n != 3 {
				t.Fatalf("admin remove all: %d %v", n, err)
			}
			if ok, _ := a.Exist(ctx, "same/key"); ok {
				t.Fatal("a's key survived the admin's remove all")
			}
		})
	}
}

// TestTenantsDurableRestart: after a master restart, the node re-reports
// a tenant's object into that tenant's namespace (the header carries it).
func TestTenantsDurableRestart(t *testing.T) {
	c := newTenantCluster(t, master.Config{Durable: true}, 1, 4<<20)
	ctx := ctxT(t)
	a := c.tenantClient("token-a-first")
	if err := a.Put(ctx, "kept", value("kept", 8192)); err != nil {
		t.Fatal(err)
	}
	c.restartMaster()
	b := c.tenantClient("token-b-first")
	waitfor.Cond(t, 10*time.Second, "a's object restored into its namespace", func() bool {
		got, err := a.Get(ctx, "kept")
		return err == nil && bytes.Equal(got, value("kept", 8192))
	})
	if ok, _ := b.Exist(ctx, "kept"); ok {
		t.Fatal("a's restored object is visible to b")
	}
}

// TestTenantQuotaUnderLoad: tenant a fills its quota and is refused with
// ErrQuotaExceeded (Mooncake's -1700) at once, while tenant b puts under
// load at the same time and never fails.
func TestTenantQuotaUnderLoad(t *testing.T) {
	c := newTenantCluster(t, master.Config{TenantHighWatermark: -1}, 1, 8<<20) // strict admission alone
	ctx := ctxT(t)
	a, b := c.tenantClient("token-a-first"), c.tenantClient("token-b-first")
	var wg sync.WaitGroup
	bErr := make(chan error, 1)
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("b/%d", i)
			if err := b.Put(ctx, k, value(k, 16<<10)); err != nil {
				bErr <- fmt.Errorf("b put %d: %w", i, err)
				return
			}
			if i%8 == 7 { // keep b's use bounded: it has no quota, the pool has
				if _, err := b.RemoveByRegex(ctx, "^b/", true); err != nil {
					bErr <- err
					return
				}
			}
		}
	})
	var refused error
	stored := 0
	for i := range 64 {
		err := a.Put(ctx, fmt.Sprintf("a/%d", i), value("a", 16<<10))
		if err != nil {
			refused = err
			break
		}
		stored++
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-bErr:
		t.Fatalf("tenant b failed while a was at its quota: %v", err)
	default:
	}
	var re *store.RemoteError
	if !errors.Is(refused, store.ErrQuotaExceeded) || !errors.As(refused, &re) || re.Code != -1700 {
		t.Fatalf("a's put over quota: %v", refused)
	}
	if stored != 16 { // 256 KiB / 16 KiB
		t.Fatalf("a stored %d puts of 16 KiB under a 256 KiB quota", stored)
	}
	for _, u := range c.master.Core().TenantUsages() {
		if (u.Tenant == "a") != (u.RejectedBytes == 1) || u.RejectedObjects != 0 {
			t.Fatalf("refusals counted: %+v", u)
		}
	}
	// Removing gives a room again; b still works.
	if err := a.Remove(ctx, "a/0", false); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, "a/again", value("a", 16<<10)); err != nil {
		t.Fatalf("a after freeing room: %v", err)
	}
	if err := b.Put(ctx, "b/last", value("b", 1<<20)); err != nil {
		t.Fatal(err)
	}
}

// TestTenantCredentials: no, wrong and expired tokens are refused; a token
// rotated out stops working on connections already open; the master goes
// on serving the others.
func TestTenantCredentials(t *testing.T) {
	c := newTenantCluster(t, master.Config{}, 1, 4<<20)
	ctx := ctxT(t)
	newClient := func(token string) (*store.Client, error) {
		eng, err := transfer.Open(ctx, transfer.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		cl, err := store.New(ctx, store.Config{Master: c.master.Addr(), Mover: eng, Token: token, LocalBufferSize: 1 << 20,
			PingInterval: 20 * time.Millisecond, RPCTimeout: 2 * time.Second})
		if err == nil {
			t.Cleanup(func() { cl.Close() })
		}
		return cl, err
	}
	for _, tok := range []string{"", "token-a-firsT", "Bearer token-a-first"} {
		if _, err := newClient(tok); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("token %q: %v, want ErrUnauthorized", tok, err)
		}
	}
	a, err := newClient("token-a-first")
	if err != nil {
		t.Fatal(err)
	}
	b := c.tenantClient("token-b-first")
	if err := a.Put(ctx, "k", value("k", 4096)); err != nil {
		t.Fatal(err)
	}
	// Rotate a's token: the new one works at once, the old one stops on
	// the open connections too (fastrpc and gRPC), b is untouched.
	c.rewrite(t, strings.Replace(tenantPolicy, "token-a-first", "token-a-second", 1))
	if err := a.Put(ctx, "k2", value("k2", 4096)); !errors.Is(err, store.ErrUnauthorized) {
		t.Fatalf("put with a rotated-out token: %v", err)
	}
	if _, err := a.Get(ctx, "k"); err == nil {
		t.Fatal("get with a rotated-out token worked")
	}
	a2, err := newClient("token-a-second")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a2.Get(ctx, "k"); err != nil || !bytes.Equal(got, value("k", 4096)) {
		t.Fatalf("a's new token reads a's key: %v", err)
	}
	if err := b.Put(ctx, "b", value("b", 4096)); err != nil {
		t.Fatalf("b after the rotation: %v", err)
	}
	// An expired token.
	c.rewrite(t, strings.Replace(tenantPolicy, "[{token: token-a-first}]", "[{token: token-a-third, expires: 2000-01-01T00:00:00Z}]", 1))
	if _, err := newClient("token-a-third"); !errors.Is(err, store.ErrUnauthorized) {
		t.Fatalf("expired token: %v", err)
	}
	if err := b.Put(ctx, "b2", value("b", 4096)); err != nil {
		t.Fatalf("b after refusals: %v", err)
	}
}

// mooncakePolicy is a policy as Mooncake writes it: tenants and quotas,
// no credentials.
const mooncakePolicy = `version: 1
tenants:
  - name: a
    quota: 256KB
  - name: b
`

// TestTenantsNamedByID: with a policy that gives no credentials
// (Mooncake's), a client's TenantID (Mooncake's tenant_id) is its tenant:
// keys and listings are scoped to it, its quota holds, a tenant the policy
// does not list reads but cannot put (TENANT_NOT_REGISTERED); once the
// policy gives a tenant a token, naming it without the token, or naming a
// tenant the policy does not list, is refused; a token names its own
// tenant only; an admin may act inside a named tenant. Over fastrpc and
// over gRPC alone.
func TestTenantsNamedByID(t *testing.T) {
	for _, grpcOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("grpc-only=%v", grpcOnly), func(t *testing.T) {
			c := newTenantCluster(t, master.Config{TenantHighWatermark: -1}, 1, 4<<20) // strict admission alone
			c.rewrite(t, mooncakePolicy)
			ctx := ctxT(t)
			named := func(id, token string) *store.Client {
				return c.client(func(cfg *store.Config) { cfg.TenantID, cfg.Token, cfg.NoFastRPC = id, token, grpcOnly })
			}
			a, b, dflt, other := named("a", ""), named("b", ""), named("", ""), named("c", "")
			va, vb := value("a", 4096), value("b", 4096)
			if err := a.Put(ctx, "same/key", va); err != nil {
				t.Fatal(err)
			}
			if err := b.Put(ctx, "same/key", vb); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				cl   *store.Client
				want []byte
			}{{a, va}, {b, vb}} {
				if got, err := tc.cl.Get(ctx, "same/key"); err != nil || !bytes.Equal(got, tc.want) {
					t.Fatalf("get: %v (a tenant reads its own object)", err)
				}
				if ks := listKeys(t, tc.cl); len(ks) != 1 || ks[0] != "same/key" {
					t.Fatalf("list %v", ks)
				}
			}
			// The default tenant and an unlisted one: nothing to read, no put.
			for _, cl := range []*store.Client{dflt, other} {
				if _, err := cl.Get(ctx, "same/key"); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("an unregistered tenant's get of another's key: %v", err)
				}
				if err := cl.Put(ctx, "k", va); !errors.Is(err, store.ErrTenantNotRegistered) {
					t.Fatalf("an unregistered tenant's put: %v", err)
				}
				if ks := listKeys(t, cl); len(ks) != 0 {
					t.Fatalf("an unregistered tenant lists %v", ks)
				}
			}
			// a's quota (256 KiB) runs out; b's puts go on.
			var err error
			for i := 0; err == nil && i < 100; i++ {
				err = a.Put(ctx, fmt.Sprintf("fill/%d", i), va)
			}
			if !errors.Is(err, store.ErrQuotaExceeded) {
				t.Fatalf("a filling its quota: %v", err)
			}
			if err := b.Put(ctx, "after-a-full", vb); err != nil {
				t.Fatalf("b's put while a is at its quota: %v", err)
			}
			// An admin (the cluster secret) naming a acts inside a.
			if got, err := named("a", clusterSecret).Get(ctx, "same/key"); err != nil || !bytes.Equal(got, va) {
				t.Fatalf("admin naming a: %v", err)
			}

			// The policy gives a tenant a token: a and b stay open to
			// naming, p needs its token, tenants it does not list are
			// refused.
			c.rewrite(t, mooncakePolicy+"  - name: p\n    tokens: [{token: token-p-first}]\n")
			if got, err := a.Get(ctx, "same/key"); err != nil || !bytes.Equal(got, va) {
				t.Fatalf("a (open) after the policy gave p a token: %v", err)
			}
			for name, cl := range map[string]*store.Client{"unlisted": other, "default": dflt} {
				if _, err := cl.Get(ctx, "same/key"); !errors.Is(err, store.ErrUnauthorized) {
					t.Fatalf("%s tenant without a credential once the policy has tokens: %v", name, err)
				}
			}
			// A client refused at start (it registers with the master) or
			// at its first call.
			refused := func(id, token string) error {
				eng, err := transfer.Open(ctx, transfer.Config{})
				if err != nil {
					t.Fatal(err)
				}
				defer eng.Close()
				cl, err := store.New(ctx, store.Config{Master: c.master.Addr(), Mover: eng, TenantID: id, Token: token, NoFastRPC: grpcOnly})
				if err != nil {
					return err
				}
				defer cl.Close()
				_, err = cl.Get(ctx, "same/key")
				return err
			}
			if err := refused("p", ""); !errors.Is(err, store.ErrUnauthorized) {
				t.Fatalf("naming p without its token: %v", err)
			}
			if err := refused("a", "token-p-first"); !errors.Is(err, store.ErrUnauthorized) {
				t.Fatalf("p's token naming a: %v", err)
			}
			p := named("p", "token-p-first")
			if err := p.Put(ctx, "same/key", vb); err != nil {
				t.Fatal(err)
			}
			if got, err := a.Get(ctx, "same/key"); err != nil || !bytes.Equal(got, va) {
				t.Fatalf("a's object after p put the same key: %v", err)
			}
		})
	}
}

// TestTenantsNamedByIDDurableRestart: under a policy without credentials
// (Mooncake's), a storage node that names a tenant and has no credential
// re-reports every object it holds after a master restart, each into its
// own tenant's namespace: nothing is dropped for lying outside the node's
// tenant (any caller may name any tenant there anyway).
func TestTenantsNamedByIDDurableRestart(t *testing.T) {
	c := newTenantCluster(t, master.Config{Durable: true}, 0, 0)
	c.rewrite(t, mooncakePolicy)
	ctx := ctxT(t)
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	n, err := storenode.Start(nctx, storenode.Config{Master: c.master.Addr(), TenantID: "b", SegmentSize: 4 << 20,
		PingInterval: 20 * time.Millisecond, UnmountGrace: 200 * time.Millisecond})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	named := func(id string) *store.Client { return c.client(func(cfg *store.Config) { cfg.TenantID = id }) }
	a, b := named("a"), named("b")
	va, vb := value("a", 8192), value("b", 8192)
	if err := a.Put(ctx, "kept", va); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "kept", vb); err != nil {
		t.Fatal(err)
	}
	c.restartMaster()
	for _, tc := range []struct {
		cl   *store.Client
		want []byte
	}{{a, va}, {b, vb}} {
		waitfor.Cond(t, 10*time.Second, "each tenant's object restored into its namespace", func() bool {
			got, err := tc.cl.Get(ctx, "kept")
			return err == nil && bytes.Equal(got, tc.want)
		})
	}
}

// TestTenantKeepsCaching: a tenant that writes four times its quota in
// turn (a KV cache that goes on caching) keeps writing: its own watermark
// eviction (Mooncake's tenant_eviction_high_watermark_ratio, 90% of its
// quota by default) makes room for its next puts, a put refused at its
// quota succeeds again within a few ticks, every put acknowledged reads
// back at once (nothing discarded on arrival, Mooncake's issue 3741), the
// tenant never holds more than its quota, and another tenant's objects are
// left alone.
func TestTenantKeepsCaching(t *testing.T) {
	c := newTenantCluster(t, master.Config{LeaseTTL: 50 * time.Millisecond}, 1, 4<<20)
	c.rewrite(t, mooncakePolicy) // a: 256 KiB
	ctx := ctxT(t)
	a := c.client(func(cfg *store.Config) { cfg.TenantID = "a" })
	b := c.client(func(cfg *store.Config) { cfg.TenantID = "b" })
	vb := value("b", 64<<10)
	if err := b.Put(ctx, "b-key", vb); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := range 64 { // 64 x 16 KiB = 1 MiB
		k, v := fmt.Sprintf("block/%d", i), value(fmt.Sprintf("block/%d", i), 16<<10)
		waitfor.Cond(t, 10*time.Second, "room for a's next put", func() bool {
			err := a.Put(ctx, k, v)
			if errors.Is(err, store.ErrQuotaExceeded) {
				refused++
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			return true
		})
		if got, err := a.Get(ctx, k); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("put %d acknowledged, then read: %v", i, err)
		}
		for _, u := range c.master.Core().TenantUsages() {
			if u.Tenant == "a" && u.Bytes > 256<<10 {
				t.Fatalf("a holds %d bytes, over its quota", u.Bytes)
			}
		}
	}
	var ua master.TenantUsage
	for _, u := range c.master.Core().TenantUsages() {
		if u.Tenant == "a" {
			ua = u
		}
	}
	if ua.Evicted < 40 {
		t.Fatalf("a's usage %+v: its watermark evicted %d objects of 64 written into a quota of 16", ua, ua.Evicted)
	}
	t.Logf("a: %+v; puts refused at the quota before room was made: %d", ua, refused)
	// The admin API's counters (Mooncake's name for the bytes).
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+clusterSecret)
	rec := httptest.NewRecorder()
	c.master.AdminHTTP().ServeHTTP(rec, req)
	for name, atLeast := range map[string]uint64{"mooncake_tenant_evict_bytes_total": ua.EvictedBytes, "mooncake_tenant_evict_objects_total": ua.Evicted} {
		m := regexp.MustCompile(name + `\{tenant_id="a"\} (\d+)`).FindStringSubmatch(rec.Body.String())
		if m == nil {
			t.Errorf("/metrics lacks %s for a", name)
			continue
		}
		if n, _ := strconv.ParseUint(m[1], 10, 64); n < atLeast { // the watermark may have taken more since
			t.Errorf("%s = %d, below %d", name, n, atLeast)
		}
	}
	if got, err := b.Get(ctx, "b-key"); err != nil || !bytes.Equal(got, vb) {
		t.Fatalf("b's object after a's churn: %v", err)
	}
}
