package masterserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/master"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"github.com/kvcache-go/mooncake/internal/tlsconf"
	"github.com/kvcache-go/mooncake/internal/tlsconf/tlstest"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

const testPolicy = `version: 1
tenants:
  - name: a
    tokens: [{token: token-a-0001}]
    cert_names: [client-a]
  - name: b
    tokens: [{token: token-b-0001}]
`

type recEvents struct {
	mu   sync.Mutex
	keys []string
}

func (r *recEvents) Stored(key string, _ master.Tier) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
}
func (r *recEvents) Removed(string, master.Tier) {}

func startTenantServer(t *testing.T, srvTLS *tls.Config, ev master.EventSink) *Server {
	t.Helper()
	set, err := tenant.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	core := master.DefaultConfig()
	core.Events = ev
	s, err := Start(ServerConfig{Core: core, Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: "the-secret", Tenants: tenant.Static(set), TLS: srvTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func dialGRPC(t *testing.T, addr string, creds credentials.TransportCredentials) pb.MasterServiceClient {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewMasterServiceClient(conn)
}

func bearer(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// TestTenantRPCs: unauthenticated calls are refused, a tenant cannot
// unmount another's segment, events of tenant keys stay off the open
// stream, and the admin HTTP API needs the admin role.
func TestTenantRPCs(t *testing.T) {
	ev := &recEvents{}
	s := startTenantServer(t, nil, ev)
	c := dialGRPC(t, s.Addr(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Exist(ctx, &pb.KeyRequest{Key: "k"}); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Fatalf("no credential: %v", err)
	}
	if _, err := c.Exist(bearer(ctx, "token-a-0002"), &pb.KeyRequest{Key: "k"}); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong credential: %v", err)
	}
	a, b, admin := bearer(ctx, "token-a-0001"), bearer(ctx, "token-b-0001"), bearer(ctx, "the-secret")
	seg := &pb.Segment{Name: "seg-a", Endpoint: "127.0.0.1:1", Base: 1 << 30, Size: 1 << 20}
	if st, err := c.MountSegment(a, &pb.MountSegmentRequest{ClientId: "ca", Segment: seg}); err != nil || st.Code != 0 {
		t.Fatalf("mount: %v %v", st, err)
	}
	if st, err := c.UnmountSegment(b, &pb.UnmountSegmentRequest{ClientId: "ca", Name: "seg-a"}); err != nil || st.Code != master.CodeSegmentNotFound {
		t.Fatalf("b unmounting a's segment: %v %v", st, err)
	}
	for _, ctx := range []context.Context{a, admin} {
		r, err := c.PutStart(ctx, &pb.PutStartRequest{ClientId: "ca", Key: "k", Size: 10})
		if err != nil || r.Status.Code != 0 {
			t.Fatalf("put: %v %v", r, err)
		}
		if st, err := c.PutCommit(ctx, &pb.PutCommitRequest{ClientId: "ca", Key: "k"}); err != nil || st.Status.Code != 0 {
			t.Fatalf("commit: %v %v", st, err)
		}
	}
	ev.mu.Lock()
	got := append([]string(nil), ev.keys...)
	ev.mu.Unlock()
	if len(got) != 1 || got[0] != "k" {
		t.Fatalf("events published %q, want the admin's raw key only", got)
	}
	// The tenant's object: visible as "k" to a only.
	if r, err := c.Exist(b, &pb.KeyRequest{Key: "k"}); err != nil || r.Exists {
		t.Fatalf("b sees a raw or a's key: %v %v", r, err)
	}
	if r, err := c.Query(a, &pb.KeyRequest{Key: "k"}); err != nil || r.Key != "k" {
		t.Fatalf("a's query: %v %v", r, err)
	}
	for tok, want := range map[string]int{"": http.StatusUnauthorized, "token-a-0001": http.StatusForbidden, "the-secret": http.StatusOK} {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.HTTPAddr()+"/get_all_keys", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("admin API with %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}
	// The tenants' figures, for the admin.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.HTTPAddr()+"/api/v1/tenant_quotas?tenant_id=a", nil)
	req.Header.Set("Authorization", "Bearer the-secret")
	qr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var q struct {
		Success bool
		Data    tenantQuotaJSON
	}
	err = json.NewDecoder(qr.Body).Decode(&q)
	qr.Body.Close()
	if err != nil || !q.Success || q.Data.TenantID != "a" || q.Data.Objects != 1 || q.Data.ChargedBytes != 10 {
		t.Fatalf("tenant_quotas: %+v %v", q, err)
	}
	req, _ = http.NewRequestWithContext(ctx, "GET", "http://"+s.HTTPAddr()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer the-secret")
	mr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mr.Body)
	mr.Body.Close()
	if !strings.Contains(string(body), `mooncake_tenant_quota_charged_bytes{tenant_id="a"} 10`) {
		t.Fatalf("metrics lack the tenant gauges:\n%s", body)
	}
	if st, err := c.UnmountSegment(a, &pb.UnmountSegmentRequest{ClientId: "ca", Name: "seg-a"}); err != nil || st.Code != 0 {
		t.Fatalf("a unmounting its segment: %v %v", st, err)
	}
	resp, err := http.Get("http://" + s.HTTPAddr() + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health stays open: %v", err)
	}
	resp.Body.Close()
}

// TestTenantTLS: with TLS on, gRPC and fastrpc work for clients that trust
// the master's CA, a client certificate named in the policy is a tenant's
// credential, and plaintext, an untrusted server certificate or a client
// certificate of another CA are refused while the master keeps serving.
func TestTenantTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "test")
	sc, sk := ca.Issue("master")
	srvTLS, err := tlsconf.Server(tlsconf.Files{Cert: sc, Key: sk, CA: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	s := startTenantServer(t, srvTLS, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cliTLS, err := tlsconf.Client(tlsconf.Files{CA: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	c := dialGRPC(t, s.Addr(), credentials.NewTLS(cliTLS))
	if r, err := c.Exist(bearer(ctx, "token-a-0001"), &pb.KeyRequest{Key: "k"}); err != nil || r.Status.Code != 0 {
		t.Fatalf("gRPC over TLS: %v %v", r, err)
	}
	fc, err := fastrpc.DialWith(ctx, s.Addr(), fastrpc.DialOptions{TLS: cliTLS, Credential: []byte("token-a-0001")})
	if err != nil {
		t.Fatalf("fastrpc over TLS: %v", err)
	}
	req, _ := pb.Marshal(&pb.KeyRequest{Key: "k"})
	if _, err := fc.Call(ctx, pb.FastExist, req); err != nil {
		t.Fatalf("fastrpc call over TLS: %v", err)
	}
	fc.Close()
	// mTLS: the certificate named client-a is tenant a, no token needed.
	cc, ck := ca.Issue("client-a")
	mTLS, _ := tlsconf.Client(tlsconf.Files{CA: ca.File, Cert: cc, Key: ck})
	mc := dialGRPC(t, s.Addr(), credentials.NewTLS(mTLS))
	if r, err := mc.Exist(ctx, &pb.KeyRequest{Key: "k"}); err != nil || r.Status.Code != 0 {
		t.Fatalf("mTLS identity: %v %v", r, err)
	}
	// Refusals.
	if _, err := dialGRPC(t, s.Addr(), nil).Exist(bearer(ctx, "token-a-0001"), &pb.KeyRequest{Key: "k"}); err == nil {
		t.Fatal("plaintext gRPC to the TLS port worked")
	}
	other := tlstest.NewCA(t, "other")
	untrusting, _ := tlsconf.Client(tlsconf.Files{CA: other.File})
	if _, err := dialGRPC(t, s.Addr(), credentials.NewTLS(untrusting)).Exist(bearer(ctx, "token-a-0001"), &pb.KeyRequest{Key: "k"}); err == nil {
		t.Fatal("a client accepted a master certificate from a CA it does not trust")
	}
	oc, ok := other.Issue("client-a")
	forged, _ := tlsconf.Client(tlsconf.Files{CA: ca.File, Cert: oc, Key: ok})
	if _, err := dialGRPC(t, s.Addr(), credentials.NewTLS(forged)).Exist(ctx, &pb.KeyRequest{Key: "k"}); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
	if _, err := fastrpc.DialWith(ctx, s.Addr(), fastrpc.DialOptions{TLS: forged, Credential: []byte{}}); err == nil {
		t.Fatal("fastrpc: a client certificate from another CA was accepted")
	}
	if r, err := c.Exist(bearer(ctx, "token-b-0001"), &pb.KeyRequest{Key: "k"}); err != nil || r.Status.Code != 0 {
		t.Fatalf("the master stopped serving after refusals: %v %v", r, err)
	}
}

// TestTenantQuotaAPIWithoutTenants: a master without a tenant policy
// answers the tenant quota API as Mooncake's outside its multi-tenant
// mode (409, UNAVAILABLE_IN_CURRENT_MODE), for every method.
func TestTenantQuotaAPIWithoutTenants(t *testing.T) {
	s, err := Start(ServerConfig{Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, method := range []string{"GET", "PUT", "DELETE"} {
		req, _ := http.NewRequest(method, "http://"+s.HTTPAddr()+"/api/v1/tenant_quotas?tenant_id=a", strings.NewReader(`{"requested_quota_bytes": 1}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Success   bool
			ErrorCode int32 `json:"error_code"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusConflict || out.Success || out.ErrorCode != codeUnavailableInMode {
			t.Fatalf("%s: %d %+v %v", method, resp.StatusCode, out, err)
		}
	}
}

// TestTenantSegmentOwnership: with tenants (and grants, so freed space is
// scrubbed), tenant b, naming tenant a's node's client id, is told nothing
// of a's segment's dirty extents and cannot report them zeroed, nor mount
// a segment under the name of a's (which would unmount a's with its
// objects); a's own node can.
func TestTenantSegmentOwnership(t *testing.T) {
	set, err := tenant.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := grant.ParseKeys([]byte("1:" + grant.NewKeyHex()))
	if err != nil {
		t.Fatal(err)
	}
	core := master.DefaultConfig()
	core.PutTimeout = 100 * time.Millisecond // the removed put's extent is held while its write grant lives
	s, err := Start(ServerConfig{Core: core, Addr: "127.0.0.1:0", Secret: "the-secret", Tenants: tenant.Static(set), Grants: keys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := dialGRPC(t, s.Addr(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := bearer(ctx, "token-a-0001"), bearer(ctx, "token-b-0001")
	seg := &pb.Segment{Name: "seg-a", Endpoint: "127.0.0.1:1", Base: 1 << 30, Size: 1 << 20}
	proof := func(client string, sg *pb.Segment) []byte {
		p, err := keys.MountProof(client, sg.Endpoint, sg.Base, sg.Size, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if st, err := c.MountSegment(a, &pb.MountSegmentRequest{ClientId: "ca", Segment: seg, Proof: proof("ca", seg)}); err != nil || st.Code != 0 {
		t.Fatalf("mount: %v %v", st, err)
	}
	if r, err := c.PutStart(a, &pb.PutStartRequest{ClientId: "ca", Key: "k", Size: 4096}); err != nil || r.Status.Code != 0 {
		t.Fatalf("put: %v %v", r, err)
	}
	if r, err := c.PutCommit(a, &pb.PutCommitRequest{ClientId: "ca", Key: "k"}); err != nil || r.Status.Code != 0 {
		t.Fatalf("commit: %v %v", r, err)
	}
	if r, err := c.Remove(a, &pb.RemoveRequest{Key: "k"}); err != nil || r.Status.Code != 0 {
		t.Fatalf("remove: %v %v", r, err)
	}
	if d := s.Core().DirtyBytes(); d == 0 {
		t.Fatal("the removed object's extent is not dirty")
	}
	var named []*pb.Extent
	waitfor.Cond(t, 5*time.Second, "the extent named for zeroing once its put's write grant ended", func() bool {
		r, err := c.Ping(b, &pb.PingRequest{ClientId: "ca"})
		if err != nil || len(r.Scrub) != 0 {
			t.Fatalf("b's ping as a's node: %v, told %d extents to zero", err, len(r.GetScrub()))
		}
		r, err = c.Ping(bearer(ctx, "the-secret"), &pb.PingRequest{ClientId: "ca"})
		if err != nil {
			t.Fatal(err)
		}
		named = r.Scrub
		return named != nil
	})
	if _, err := c.Ping(b, &pb.PingRequest{ClientId: "ca", Scrubbed: named}); err != nil {
		t.Fatal(err)
	}
	if d := s.Core().DirtyBytes(); d == 0 {
		t.Fatal("b's report freed a's unzeroed extent")
	}
	if st, err := c.MountSegment(b, &pb.MountSegmentRequest{ClientId: "cb", Segment: seg, Proof: proof("cb", seg)}); err != nil || st.Code != master.CodeSegmentExists {
		t.Fatalf("b mounting a's segment name: %v %v", st, err)
	}
	if r, err := c.RemountSegments(b, &pb.RemountSegmentsRequest{ClientId: "cb", Segments: []*pb.Segment{seg}, Proofs: [][]byte{proof("cb", seg)}}); err != nil || r.Status.Code != master.CodeSegmentExists {
		t.Fatalf("b remounting a's segment name: %v %v", r.GetStatus(), err)
	}
	if segs := s.Core().Segments(); len(segs) != 1 || segs[0].Client != "ca" {
		t.Fatalf("segments after b's attempts: %+v", segs)
	}
	if _, err := c.Ping(a, &pb.PingRequest{ClientId: "ca", Scrubbed: named}); err != nil {
		t.Fatal(err)
	}
	if d := s.Core().DirtyBytes(); d != 0 {
		t.Fatalf("a's node's report left %d bytes dirty", d)
	}

	// Another tenant learns no client id of a's segments, and cannot take
	// (or fail) the copy tasks of a's node, which carry grants for a's
	// bytes, by naming its id.
	for _, who := range []struct {
		ctx  context.Context
		want string
	}{{a, "ca"}, {b, ""}} {
		if r, err := c.QuerySegment(who.ctx, &pb.SegmentRequest{Name: "seg-a"}); err != nil || r.Status.Code != 0 || r.ClientId != who.want {
			t.Fatalf("query of seg-a: client %q, want %q (%v %v)", r.GetClientId(), who.want, err, r.GetStatus())
		}
	}
	seg2 := &pb.Segment{Name: "seg-a2", Endpoint: "127.0.0.1:2", Base: 1 << 31, Size: 1 << 20}
	if st, err := c.MountSegment(a, &pb.MountSegmentRequest{ClientId: "ca2", Segment: seg2, Proof: proof("ca2", seg2)}); err != nil || st.Code != 0 {
		t.Fatalf("mount: %v %v", st, err)
	}
	if r, err := c.PutStart(a, &pb.PutStartRequest{ClientId: "ca", Key: "k2", Size: 4096, Config: &pb.ReplicateConfig{PreferredSegments: []string{"seg-a"}}}); err != nil || r.Status.Code != 0 || r.Replicas[0].Segment != "seg-a" {
		t.Fatalf("put: %v %v", r, err)
	}
	if r, err := c.PutCommit(a, &pb.PutCommitRequest{ClientId: "ca", Key: "k2"}); err != nil || r.Status.Code != 0 {
		t.Fatalf("commit: %v %v", r, err)
	}
	tc := pb.NewMasterTasksClient(dialConn(t, s.Addr()))
	ct, err := tc.CreateCopyTask(a, &pb.CreateCopyTaskRequest{Key: "k2", Targets: []string{"seg-a2"}})
	if err != nil || ct.Status.Code != 0 {
		t.Fatalf("copy task: %v %v", ct.GetStatus(), err)
	}
	if r, err := tc.FetchTasks(b, &pb.FetchTasksRequest{ClientId: "ca"}); err != nil || len(r.Tasks) != 0 {
		t.Fatalf("b fetching a's node's tasks: %v, %d tasks", err, len(r.GetTasks()))
	}
	if st, err := tc.FinishTask(b, &pb.FinishTaskRequest{ClientId: "ca", Id: ct.Id, Failure: "b says so"}); err != nil || st.Code == 0 {
		t.Fatalf("b finishing a's task: %v %v", st, err)
	}
	if r, err := tc.FetchTasks(a, &pb.FetchTasksRequest{ClientId: "ca"}); err != nil || len(r.Tasks) != 1 {
		t.Fatalf("a's node fetching its task: %v, %d tasks", err, len(r.GetTasks()))
	}
}

func dialConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestCooperativeTenantEvents: under a policy that gives no one a
// credential (tenants by id only, as Mooncake's) a tenant's objects are
// published on the event stream, namespaced; under one with credentials
// they are not (TestTenantRPCs).
func TestCooperativeTenantEvents(t *testing.T) {
	set, err := tenant.Parse([]byte("version: 1\ntenants:\n  - name: a\n  - name: b\n"))
	if err != nil || !set.Cooperative() {
		t.Fatalf("policy: %v, cooperative %v", err, set != nil && set.Cooperative())
	}
	ev := &recEvents{}
	core := master.DefaultConfig()
	core.Events = ev
	s, err := Start(ServerConfig{Core: core, Addr: "127.0.0.1:0", Tenants: tenant.Static(set)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := dialGRPC(t, s.Addr(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := metadata.AppendToOutgoingContext(ctx, tenant.IDHeader, "a")
	seg := &pb.Segment{Name: "seg", Endpoint: "127.0.0.1:1", Base: 1 << 30, Size: 1 << 20}
	if st, err := c.MountSegment(a, &pb.MountSegmentRequest{ClientId: "ca", Segment: seg}); err != nil || st.Code != 0 {
		t.Fatalf("mount: %v %v", st, err)
	}
	if r, err := c.PutStart(a, &pb.PutStartRequest{ClientId: "ca", Key: "k", Size: 10}); err != nil || r.Status.Code != 0 {
		t.Fatalf("put: %v %v", r, err)
	}
	if r, err := c.PutCommit(a, &pb.PutCommitRequest{ClientId: "ca", Key: "k"}); err != nil || r.Status.Code != 0 {
		t.Fatalf("commit: %v %v", r, err)
	}
	ev.mu.Lock()
	got := append([]string(nil), ev.keys...)
	ev.mu.Unlock()
	if want := tenant.Namespace("a") + "k"; len(got) != 1 || got[0] != want {
		t.Fatalf("events %q, want [%q]", got, want)
	}
}

// TestTenantClientBinding: a client id is its registering tenant's:
// another tenant naming it can neither remount it (which would drop its
// restore) nor make the master forget it (Leave); its own tenant and an
// admin can.
func TestTenantClientBinding(t *testing.T) {
	set, err := tenant.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(ServerConfig{Core: master.DefaultConfig(), Addr: "127.0.0.1:0", Secret: "the-secret", Tenants: tenant.Static(set)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := dialGRPC(t, s.Addr(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, admin := bearer(ctx, "token-a-0001"), bearer(ctx, "token-b-0001"), bearer(ctx, "the-secret")
	known := func(id string) bool {
		r, err := c.Ping(admin, &pb.PingRequest{ClientId: id})
		if err != nil {
			t.Fatal(err)
		}
		return !r.NeedRemount
	}
	if r, err := c.RemountSegments(a, &pb.RemountSegmentsRequest{ClientId: "ca"}); err != nil || r.Status.Code != 0 {
		t.Fatalf("a registers: %v %v", r, err)
	}
	if !known("ca") {
		t.Fatal("a's client not registered")
	}
	if st, err := c.Leave(b, &pb.LeaveRequest{ClientId: "ca"}); err != nil || st.Code != 0 {
		t.Fatalf("b's leave: %v %v", st, err)
	}
	if !known("ca") {
		t.Fatal("b's Leave made the master forget a's client")
	}
	if r, err := c.RemountSegments(b, &pb.RemountSegmentsRequest{ClientId: "ca"}); err != nil || r.Status.Code != master.Code(master.ErrInvalidParams) {
		t.Fatalf("b remounts a's client: %v %v, want INVALID_PARAMS", r, err)
	}
	if st, err := c.MountSegment(b, &pb.MountSegmentRequest{ClientId: "ca", Segment: &pb.Segment{Name: "seg-b", Endpoint: "127.0.0.1:2", Base: 1 << 30, Size: 1 << 20}}); err != nil || st.Code != master.Code(master.ErrInvalidParams) {
		t.Fatalf("b mounts under a's client: %v %v, want INVALID_PARAMS", st, err)
	}
	if st, err := c.Leave(a, &pb.LeaveRequest{ClientId: "ca"}); err != nil || st.Code != 0 || known("ca") {
		t.Fatalf("a's own leave: %v %v, known %v", st, err, known("ca"))
	}
	// Forgotten, the id is free again: b registers it as its own; an admin
	// may act on any client.
	if r, err := c.RemountSegments(b, &pb.RemountSegmentsRequest{ClientId: "ca"}); err != nil || r.Status.Code != 0 {
		t.Fatalf("b registers a free id: %v %v", r, err)
	}
	if st, err := c.Leave(admin, &pb.LeaveRequest{ClientId: "ca"}); err != nil || st.Code != 0 || known("ca") {
		t.Fatalf("admin's leave: %v %v", st, err)
	}
}
