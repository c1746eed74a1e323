package masterserver

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
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
}

// resolve maps a bearer token (and the names of a verified client
// certificate) to a tenant, and tells until when the answer holds (zero:
// until the policy changes).
func (a *authn) resolve(token string, certNames []string) (*tenant.Tenant, time.Time, error) {
	if a.secret != "" && subtle.ConstantTimeCompare([]byte(token), []byte(a.secret)) == 1 {
		return clusterAdmin, time.Time{}, nil
	}
	set := a.src.Set()
	if token != "" || len(certNames) == 0 {
		t, err := set.Authenticate(token, a.now())
		if err != nil {
			return nil, time.Time{}, err
		}
		return t, set.Expires(token), nil
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
		var token string
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("authorization"); len(v) > 0 {
				token = tenant.Bearer(v[0])
			}
		}
		var names []string
		if p, ok := peer.FromContext(ctx); ok && p.AuthInfo != nil {
			names = certNamesOf(p.AuthInfo)
		}
		t, _, err := a.resolve(token, names)
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
		token := string(cred)
		t, exp, err := a.resolve(token, names)
		if err != nil {
			return nil, fmt.Errorf("master: %w", err)
		}
		h := s.FastHandler(withCaller(ctx, t))
		gen := a.src.Generation()
		return func(method uint8, payload []byte) ([]byte, uint8) {
			if g := a.src.Generation(); g != gen || (!exp.IsZero() && !a.now().Before(exp)) {
				nt, nexp, err := a.resolve(token, names)
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
// every tenant's keys); a tenant's token is answered 403.
func requireAdmin(a *authn, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/metrics" {
			next.ServeHTTP(w, r)
			return
		}
		t, _, err := a.resolve(tenant.Bearer(r.Header.Get("Authorization")), nil)
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

// tenantQuotas adapts the policy in force to the core's quotas.
type tenantQuotas struct{ src *tenant.Source }

func (q tenantQuotas) Limits(name string) (uint64, uint64, bool) {
	t := q.src.Set().Lookup(name)
	if t == nil {
		return 0, 0, false
	}
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
// another tenant's namespace).
func ownHeld(t *tenant.Tenant, hs []*pb.HeldObject) []*pb.HeldObject {
	if t.Namespace == "" {
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

// rawEvents passes on the object events of the raw key space only: the
// event stream (internal/kvevents over ZeroMQ) has no credentials, so with
// tenants on, no tenant's key, nor the fact that it exists, is published
// on it.
type rawEvents struct{ next master.EventSink }

func (e rawEvents) Stored(key string, t master.Tier) {
	if tn, _ := tenant.Split(key); tn == "" {
		e.next.Stored(key, t)
	}
}

func (e rawEvents) Removed(key string, t master.Tier) {
	if tn, _ := tenant.Split(key); tn == "" {
		e.next.Removed(key, t)
	}
}
