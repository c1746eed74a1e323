package masterserver

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	"github.com/kvcache-go/mooncake/internal/httpjson"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/storeerr"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"github.com/kvcache-go/mooncake/internal/tlsconf"
)

// Tenants (ServerConfig.Tenants). Every gRPC call carries "authorization:
// Bearer <token>" (or comes over mutual TLS with a certificate a tenant's
// cert_names list); every fastrpc connection presents the token once, in
// its credential frame. The caller's tenant rides in the call's context
// (callerOf), and the service puts its Namespace in front of every key it
// is given and takes it off every key it returns, so a tenant sees, lists,
// removes and counts only its own keys, and a key of another tenant reads
// as absent. The cluster secret (ServerConfig.Secret), and tokens of
// tenants marked admin, are the admin role: the raw key space (every
// tenant's keys, with their namespaces) and the cluster-wide calls.

// clusterAdmin is the identity of the cluster secret.
var clusterAdmin = &tenant.Tenant{Name: "_cluster", Admin: true}

type callerKey struct{}

// withCaller attaches the caller's tenant to ctx.
func withCaller(ctx context.Context, t *tenant.Tenant) context.Context {
	return context.WithValue(ctx, callerKey{}, t)
}

// callerOf is the tenant of the call (tenant.Default without tenants).
func callerOf(ctx context.Context) *tenant.Tenant {
	if t, ok := ctx.Value(callerKey{}).(*tenant.Tenant); ok {
		return t
	}
	return tenant.Default
}

// authn resolves credentials to tenants.
type authn struct {
	secret string
	src    *tenant.Source
	now    func() time.Time
	// last is the token resolved last with its answer and the policy that
	// gave it (gRPC authenticates every call; a client's calls come in
	// runs): the same token under the same policy, not expired, is
	// answered from it (compared in constant time, as the digests are).
	last atomic.Pointer[authMemo]
}

type authMemo struct {
	set   *tenant.Set
	token string
	t     *tenant.Tenant
	exp   time.Time
}

// resolve maps a bearer token (and the names of a verified client
// certificate) to a tenant, and tells until when the answer holds (zero:
// until the policy changes). claim is the tenant the caller names
// (Mooncake's tenant_id, "" for none): without a credential it is the
// caller's tenant when the policy leaves it open (tenant.Set.Claim); with
// one it must be the credential's own tenant, unless the credential is an
// admin's (tenant.Set.ClaimAs).
func (a *authn) resolve(token, claim string, certNames []string) (*tenant.Tenant, time.Time, error) {
	t, exp, err := a.credential(token, certNames)
	if err != nil {
		return nil, exp, err
	}
	if t == nil {
		t, err = a.src.Set().Claim(claim)
		return t, time.Time{}, err
	}
	if claim != "" {
		t, err = a.src.Set().ClaimAs(t, claim)
	}
	return t, exp, err
}

// credential maps a bearer token or a client certificate's names to a
// tenant; nil and no error when the caller presents neither.
func (a *authn) credential(token string, certNames []string) (*tenant.Tenant, time.Time, error) {
	if a.secret != "" && subtle.ConstantTimeCompare([]byte(token), []byte(a.secret)) == 1 {
		return clusterAdmin, time.Time{}, nil
	}
	set := a.src.Set()
	if token != "" {
		if m := a.last.Load(); m != nil && m.set == set && subtle.ConstantTimeCompare([]byte(m.token), []byte(token)) == 1 &&
			(m.exp.IsZero() || a.now().Before(m.exp)) {
			return m.t, m.exp, nil
		}
		t, exp, err := set.AuthenticateUntil(token, a.now())
		if err == nil {
			a.last.Store(&authMemo{set: set, token: token, t: t, exp: exp})
		}
		return t, exp, err
	}
	if len(certNames) == 0 {
		return nil, time.Time{}, nil
	}
	if t := set.ByCert(certNames...); t != nil {
		return t, time.Time{}, nil
	}
	return nil, time.Time{}, fmt.Errorf("%w: certificate %v names no tenant", tenant.ErrUnauthenticated, certNames)
}

// certNamesOf are the client certificate names of a connection's TLS state.
func certNamesOf(info credentials.AuthInfo) []string {
	if ti, ok := info.(credentials.TLSInfo); ok {
		return tlsconf.Names(ti.State)
	}
	return nil
}

// tenantInterceptor authenticates every call and attaches its tenant (the
// service decides what the tenant may do).
func tenantInterceptor(a *authn) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var token, claim string
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("authorization"); len(v) > 0 {
				token = tenant.Bearer(v[0])
			}
			if v := md.Get(tenant.IDHeader); len(v) > 0 {
				claim = v[0]
			}
		}
		var names []string
		if p, ok := peer.FromContext(ctx); ok && p.AuthInfo != nil {
			names = certNamesOf(p.AuthInfo)
		}
		t, _, err := a.resolve(token, claim, names)
		if err != nil {
			return nil, grpcstatus.Errorf(codes.Unauthenticated, "master: %v", err)
		}
		return handler(withCaller(ctx, t), req)
	}
}

// fastAuthenticator authenticates each fastrpc connection once, from its
// credential frame (or its client certificate), and serves it with a
// handler bound to its tenant. The decision is checked again when the
// policy changes (a rotated-out token ends the connection) and when its
// token expires.
func (s *Service) fastAuthenticator(ctx context.Context, a *authn) fastrpc.Authenticator {
	return func(c net.Conn, cred []byte) (fastrpc.Handler, error) {
		var names []string
		if tc, ok := c.(*tls.Conn); ok {
			names = tlsconf.Names(tc.ConnectionState())
		}
		token, claim, err := tenant.DecodeCredential(cred)
		if err != nil {
			return nil, fmt.Errorf("master: %w", err)
		}
		t, exp, err := a.resolve(token, claim, names)
		if err != nil {
			return nil, fmt.Errorf("master: %w", err)
		}
		h := s.FastHandler(withCaller(ctx, t))
		gen := a.src.Generation()
		return func(method uint8, payload []byte) ([]byte, uint8) {
			if g := a.src.Generation(); g != gen || (!exp.IsZero() && !a.now().Before(exp)) {
				nt, nexp, err := a.resolve(token, claim, names)
				if err != nil || nt.Name != t.Name || nt.Admin != t.Admin {
					return []byte(fmt.Sprintf("master: credential no longer valid: %v", err)), fastrpc.StatusUnauthenticated
				}
				gen, exp = g, nexp
			}
			return h(method, payload)
		}, nil
	}
}

// requireAdmin guards the admin HTTP API with tenants on: every request
// but /health and /metrics needs the admin role (the listing pages show
// every tenant's keys); a tenant's token is answered 403. A cluster
// without a secret whose policy gives no credentials at all (Mooncake's
// cooperative tenants) has no admin to ask for: its admin API is open, as
// Mooncake's is.
func requireAdmin(a *authn, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/metrics" || (a.secret == "" && a.src.Set().Cooperative()) {
			next.ServeHTTP(w, r)
			return
		}
		t, _, err := a.credential(tenant.Bearer(r.Header.Get("Authorization")), nil)
		if err == nil && t == nil {
			err = fmt.Errorf("%w: no credential", tenant.ErrUnauthenticated)
		}
		switch {
		case err != nil:
			httpjson.Error(w, http.StatusUnauthorized, "authentication_error", "master: "+err.Error())
		case !t.Admin:
			httpjson.Error(w, http.StatusForbidden, "permission_error", "master: the admin API needs the admin role")
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// tlsCreds is gRPC's view of connections the master's TLS listener already
// secured (the listener is shared with fastrpc, so the handshake happens
// before gRPC sees the connection): it hands the connection on with its
// TLS state as the peer's AuthInfo.
type tlsCreds struct{}

func (tlsCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("master: server-side credentials only")
}

func (tlsCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	inner := c
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		inner = nc.NetConn()
	}
	tc, ok := inner.(*tls.Conn)
	if !ok {
		return nil, nil, fmt.Errorf("master: a plaintext connection on the TLS port")
	}
	return c, credentials.TLSInfo{State: tc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (tlsCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}
func (c tlsCreds) Clone() credentials.TransportCredentials { return c }
func (tlsCreds) OverrideServerName(string) error           { return nil }

// tenantQuotas adapts the policy in force to the core's quotas. The
// tenant found last is kept with the policy it was found in (a tenant's
// puts come in runs): a policy swapped in since is looked up afresh.
type tenantQuotas struct {
	src  *tenant.Source
	last atomic.Pointer[quotaHit]
}

type quotaHit struct {
	set *tenant.Set
	t   *tenant.Tenant
}

func newTenantQuotas(src *tenant.Source) *tenantQuotas { return &tenantQuotas{src: src} }

func (q *tenantQuotas) Limits(name string) (uint64, uint64, bool) {
	set := q.src.Set()
	if h := q.last.Load(); h != nil && h.set == set && h.t.Name == name {
		return h.t.QuotaBytes, h.t.QuotaObjects, true
	}
	t := set.Lookup(name)
	if t == nil {
		return 0, 0, false
	}
	q.last.Store(&quotaHit{set: set, t: t})
	return t.QuotaBytes, t.QuotaObjects, true
}

// Key scoping: the service's view of one caller's namespace.

// scope is the key a tenant's key is stored under.
func scope(ns, key string) string {
	if ns == "" {
		return key
	}
	return ns + key
}

// unscope is the key as the caller knows it.
func unscope(ns, key string) string { return strings.TrimPrefix(key, ns) }

func scopeKeys(ns string, keys []string) []string {
	if ns == "" {
		return keys
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = ns + k
	}
	return out
}

// scopeMatcher confines a bulk removal's matcher to a namespace: it sees
// the keys as the tenant knows them and walks only the namespace.
func scopeMatcher(ns string, mt master.Matcher) master.Matcher {
	if ns == "" {
		return mt
	}
	match := mt.Match
	return master.Matcher{Prefix: ns + mt.Prefix, Match: func(k string) bool {
		return strings.HasPrefix(k, ns) && match(k[len(ns):])
	}}
}

// ownHeld keeps the objects a non-admin caller may re-report: those in its
// own namespace (a node's memory or disk could otherwise place objects in
// another tenant's namespace); all of them under a policy that gives no
// credentials (tenant.Tenant.Cooperative).
func ownHeld(t *tenant.Tenant, hs []*pb.HeldObject) []*pb.HeldObject {
	if !bound(t) {
		return hs
	}
	out := hs[:0:0]
	for _, h := range hs {
		if strings.HasPrefix(h.Key, t.Namespace) {
			out = append(out, h)
		}
	}
	return out
}

// bound reports whether t's calls are held to its own segments, objects
// and tasks: not an admin's (no namespace), nor a caller's under a policy
// without credentials (which could name any tenant anyway).
func bound(t *tenant.Tenant) bool { return t.Namespace != "" && !t.Cooperative }

// rawEvents passes on the object events of the raw key space only: the
// event stream (internal/kvevents over ZeroMQ) has no credentials, so with
// tenants on, no tenant's key, nor the fact that it exists, is published
// on it. Under a cooperative policy (no credentials at all: anyone may name
// any tenant, as Mooncake's) there is nothing to keep, and tenants' keys
// are published too, namespaced ("\x00t/<tenant>/" + key), as Mooncake
// publishes them with their tenant_id.
type rawEvents struct {
	next master.EventSink
	src  *tenant.Source
}

func (e rawEvents) pass(key string) bool {
	tn, _ := tenant.Split(key)
	return tn == "" || e.src.Set().Cooperative()
}

func (e rawEvents) Stored(key string, t master.Tier) {
	if e.pass(key) {
		e.next.Stored(key, t)
	}
}

func (e rawEvents) Removed(key string, t master.Tier) {
	if e.pass(key) {
		e.next.Removed(key, t)
	}
}

// Mooncake's codes of the tenant quota API's errors beyond storeerr's.
const (
	codeUnavailableInMode = -1011 // UNAVAILABLE_IN_CURRENT_MODE
	codePersistentFail    = -1503 // PERSISTENT_FAIL
	codeTenantNotEmpty    = -1702 // TENANT_NOT_EMPTY
)

// quotaError answers Mooncake's error shape of the tenant quota API.
func quotaError(w http.ResponseWriter, status int, code int32, msg string) {
	httpjson.Write(w, status, map[string]any{"success": false, "error_code": code, "error_message": msg})
}

// noTenantAdmin answers the tenant quota API of a master without tenants
// as Mooncake's master outside its multi-tenant mode.
func noTenantAdmin(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.HandleFunc("/api/v1/tenant_quotas", func(w http.ResponseWriter, r *http.Request) {
		quotaError(w, http.StatusConflict, codeUnavailableInMode, "UNAVAILABLE_IN_CURRENT_MODE: the master has no tenant policy (--tenants, --enable_multi_tenants)")
	})
	return mux
}

// tenantQuotaJSON is one tenant's row of GET /api/v1/tenant_quotas
// (Mooncake's tenant quota snapshot fields where they exist).
type tenantQuotaJSON struct {
	TenantID            string `json:"tenant_id"`
	RequestedQuotaBytes uint64 `json:"requested_quota_bytes"`
	// EffectiveQuotaBytes: the requested quota scaled down in proportion
	// when the policy's quotas add up to more than the pool (the share
	// eviction charges first beyond).
	EffectiveQuotaBytes uint64 `json:"effective_quota_bytes"`
	ChargedBytes        uint64 `json:"charged_bytes"`
	MaxObjects          uint64 `json:"max_objects"`
	Objects             int    `json:"objects"`
	OverQuota           bool   `json:"over_quota"`
	// AdmissionClosed: puts are refused (a tenant not in the policy that
	// still holds objects or had puts refused).
	AdmissionClosed   bool `json:"admission_closed"`
	HasExplicitPolicy bool `json:"has_explicit_policy"`
	Admin             bool `json:"admin"`
}

// tenantAdmin adds the tenants' figures to the admin API: GET
// /api/v1/tenant_quotas[?tenant_id=T] (Mooncake's {"success", "data"}
// shape) and per-tenant gauges after the /metrics of next.
func tenantAdmin(src *tenant.Source, m *master.Master, next http.Handler) http.Handler {
	rows := func() []tenantQuotaJSON {
		used := map[string]master.TenantUsage{}
		for _, u := range m.TenantUsages() {
			used[u.Tenant] = u
		}
		capacity := m.Stats().Capacity
		set := src.Set()
		var sum uint64
		for _, t := range set.Tenants() {
			sum += t.QuotaBytes
		}
		var out []tenantQuotaJSON
		for _, t := range set.Tenants() {
			u := used[t.Name]
			out = append(out, tenantQuotaJSON{TenantID: t.Name, RequestedQuotaBytes: t.QuotaBytes,
				EffectiveQuotaBytes: master.EffectiveQuota(t.QuotaBytes, sum, capacity),
				ChargedBytes:        u.Bytes, MaxObjects: t.QuotaObjects, Objects: u.Objects, Admin: t.Admin, HasExplicitPolicy: true,
				OverQuota: (t.QuotaBytes > 0 && u.Bytes > t.QuotaBytes) || (t.QuotaObjects > 0 && uint64(u.Objects) > t.QuotaObjects)})
			delete(used, t.Name)
		}
		for _, u := range used { // tenants the policy does not list (any more)
			out = append(out, tenantQuotaJSON{TenantID: u.Tenant, ChargedBytes: u.Bytes, Objects: u.Objects, AdmissionClosed: true})
		}
		slices.SortStableFunc(out[len(out)-len(used):], func(a, b tenantQuotaJSON) int { return strings.Compare(a.TenantID, b.TenantID) })
		return out
	}
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.HandleFunc("GET /api/v1/tenant_quotas", func(w http.ResponseWriter, r *http.Request) {
		all := rows()
		id := r.URL.Query().Get("tenant_id")
		if id == "" {
			httpjson.Write(w, http.StatusOK, map[string]any{"success": true, "data": all})
			return
		}
		for _, row := range all {
			if row.TenantID == id {
				httpjson.Write(w, http.StatusOK, map[string]any{"success": true, "data": row})
				return
			}
		}
		quotaError(w, http.StatusNotFound, storeerr.CodeTenantNotRegistered, "TENANT_NOT_REGISTERED")
	})
	// Mooncake's upsert and delete of a tenant's quota, written back to
	// the policy's file or etcd key (tenant.Source.Edit).
	tenantID := func(w http.ResponseWriter, r *http.Request) (string, bool) {
		id := r.URL.Query().Get("tenant_id")
		if err := tenant.CheckName(id); err != nil {
			quotaError(w, http.StatusBadRequest, storeerr.CodeInvalidParams, "Missing or invalid tenant_id: "+err.Error())
			return "", false
		}
		return id, true
	}
	editFailed := func(w http.ResponseWriter, err error) {
		switch {
		case errors.Is(err, tenant.ErrReadOnly):
			quotaError(w, http.StatusConflict, codeUnavailableInMode, "UNAVAILABLE_IN_CURRENT_MODE: "+err.Error())
		case errors.Is(err, tenant.ErrNoTenant):
			quotaError(w, http.StatusNotFound, storeerr.CodeObjectNotFound, "OBJECT_NOT_FOUND: "+err.Error())
		default:
			quotaError(w, http.StatusInternalServerError, codePersistentFail, "PERSISTENT_FAIL: "+err.Error())
		}
	}
	rowOf := func(id string) any {
		for _, row := range rows() {
			if row.TenantID == id {
				return row
			}
		}
		return nil
	}
	mux.HandleFunc("PUT /api/v1/tenant_quotas", func(w http.ResponseWriter, r *http.Request) {
		id, ok := tenantID(w, r)
		if !ok {
			return
		}
		var body struct {
			RequestedQuotaBytes uint64 `json:"requested_quota_bytes"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
			quotaError(w, http.StatusBadRequest, storeerr.CodeInvalidParams, "bad body: "+err.Error())
			return
		}
		if body.RequestedQuotaBytes == 0 || body.RequestedQuotaBytes > tenant.MaxQuota {
			quotaError(w, http.StatusBadRequest, storeerr.CodeInvalidParams, "Tenant quota must be in [1, 2^63 - 1] bytes")
			return
		}
		if _, err := src.Edit(r.Context(), func(b []byte) ([]byte, error) { return tenant.SetQuota(b, id, body.RequestedQuotaBytes) }); err != nil {
			editFailed(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]any{"success": true, "data": rowOf(id)})
	})
	mux.HandleFunc("DELETE /api/v1/tenant_quotas", func(w http.ResponseWriter, r *http.Request) {
		id, ok := tenantID(w, r)
		if !ok {
			return
		}
		// Admission closes first (the tenant leaves the policy), then a
		// tenant that holds anything, a put admitted before included (its
		// charge counts), is put back (Mooncake's TENANT_NOT_EMPTY).
		var entry []byte
		if _, err := src.Edit(r.Context(), func(b []byte) ([]byte, error) {
			out, e, err := tenant.TakeTenant(b, id)
			entry = e
			return out, err
		}); err != nil {
			editFailed(w, err)
			return
		}
		if row, ok := rowOf(id).(tenantQuotaJSON); ok && (row.ChargedBytes > 0 || row.Objects > 0) {
			if _, err := src.Edit(r.Context(), func(b []byte) ([]byte, error) { return tenant.RestoreTenant(b, entry) }); err != nil {
				editFailed(w, err)
				return
			}
			quotaError(w, http.StatusConflict, codeTenantNotEmpty, "TENANT_NOT_EMPTY")
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]any{"success": true, "data": rowOf(id)})
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		all := rows()
		for _, g := range []struct {
			name, help string
			v          func(tenantQuotaJSON) float64
		}{
			{"mooncake_tenant_quota_requested_bytes", "Byte quota of the tenant (0: none).", func(t tenantQuotaJSON) float64 { return float64(t.RequestedQuotaBytes) }},
			{"mooncake_tenant_quota_charged_bytes", "Memory bytes charged to the tenant (replicas of its objects and puts in progress).", func(t tenantQuotaJSON) float64 { return float64(t.ChargedBytes) }},
			{"mooncake_tenant_objects", "Objects charged to the tenant.", func(t tenantQuotaJSON) float64 { return float64(t.Objects) }},
			{"mooncake_tenant_quota_over_quota", "1 when the tenant holds more than a quota (after a policy change).", func(t tenantQuotaJSON) float64 {
				if t.OverQuota {
					return 1
				}
				return 0
			}},
		} {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", g.name, g.help, g.name)
			for _, t := range all {
				fmt.Fprintf(w, "%s{tenant_id=%q} %g\n", g.name, t.TenantID, g.v(t))
			}
		}
		const rej = "mooncake_tenant_quota_reject_total"
		usages := m.TenantUsages()
		for _, c := range []struct {
			name, help string
			v          func(master.TenantUsage) uint64
		}{
			{"mooncake_tenant_evict_bytes_total", "Charged bytes the tenant's own eviction watermark evicted.", func(u master.TenantUsage) uint64 { return u.EvictedBytes }},
			{"mooncake_tenant_evict_objects_total", "Objects the tenant's own eviction watermark evicted.", func(u master.TenantUsage) uint64 { return u.Evicted }},
		} {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", c.name, c.help, c.name)
			for _, u := range usages {
				if n := c.v(u); n > 0 {
					fmt.Fprintf(w, "%s{tenant_id=%q} %d\n", c.name, u.Tenant, n)
				}
			}
		}
		const held = "mooncake_tenant_scrub_held_bytes"
		fmt.Fprintf(w, "# HELP %s Bytes the tenant's freed objects left that no other tenant may take yet (a grant on them may live); counted against its bytes quota.\n# TYPE %s gauge\n", held, held)
		for _, u := range usages {
			if u.Held > 0 {
				fmt.Fprintf(w, "%s{tenant_id=%q} %d\n", held, u.Tenant, u.Held)
			}
		}
		fmt.Fprintf(w, "# HELP %s Puts refused at admission, by reason.\n# TYPE %s counter\n", rej, rej)
		for _, u := range usages {
			for _, r := range []struct {
				reason string
				n      uint64
			}{{"bytes", u.RejectedBytes}, {"objects", u.RejectedObjects}, {"not_registered", u.RejectedUnregistered}} {
				if r.n > 0 {
					fmt.Fprintf(w, "%s{tenant_id=%q,reason=%q} %d\n", rej, u.Tenant, r.reason, r.n)
				}
			}
		}
	})
	return mux
}
