package tenant

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"sigs.k8s.io/yaml"
)

// Errors callers branch on.
var (
	// ErrUnauthenticated: no credential, a wrong one or an expired one.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPolicy: a policy that cannot be used (syntax, names, quotas).
	ErrPolicy = errors.New("bad tenant policy")
)

// MaxTenants bounds the tenants of one policy, MaxTokens the tokens of one
// tenant, and MaxPolicy the bytes of a policy.
const (
	MaxTenants = 4096
	MaxTokens  = 64
	MaxPolicy  = 4 << 20
)

// nsPrefix starts every tenant namespace; the master's put slots use
// "\x00slot/", user keys of the raw key space may start with anything, but
// a tenant's keys always carry the whole Namespace in front.
const nsPrefix = "\x00t/"

// Namespace is the internal key prefix of tenant name's keys.
func Namespace(name string) string { return nsPrefix + name + "/" }

// Split returns the tenant a raw key belongs to ("" for a key outside
// every tenant namespace) and the key as that tenant sees it.
func Split(key string) (tenant, user string) {
	if !strings.HasPrefix(key, nsPrefix) {
		return "", key
	}
	rest := key[len(nsPrefix):]
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return "", key
	}
	return rest[:i], rest[i+1:]
}

// SplitBytes is Split of a key held as bytes (the results share its
// memory; nothing is copied).
func SplitBytes(key []byte) (tenant, user []byte) {
	if len(key) < len(nsPrefix) || string(key[:len(nsPrefix)]) != nsPrefix {
		return nil, key
	}
	rest := key[len(nsPrefix):]
	i := bytes.IndexByte(rest, '/')
	if i <= 0 {
		return nil, key
	}
	return rest[:i], rest[i+1:]
}

// InNamespace reports whether key (held as bytes) lies in tenant name's
// namespace: SplitBytes(key) would return name (a tenant name: it holds
// no '/').
func InNamespace[K string | []byte](key K, name string) bool {
	n := len(nsPrefix) + len(name)
	return name != "" && len(key) > n && key[n] == '/' && string(key[:len(nsPrefix)]) == nsPrefix &&
		string(key[len(nsPrefix):n]) == name
}

// Tenant is one caller identity. Its fields are read-only once in a Set.
type Tenant struct {
	Name         string
	Admin        bool   // may act on the whole cluster (every key, unmounts)
	QuotaBytes   uint64 // memory bytes of its objects' replicas (0: no limit)
	QuotaObjects uint64 // objects (0: no limit)
	// Namespace is the prefix of the tenant's keys ("" for an admin and
	// for Default: the raw key space).
	Namespace string
	// Open: the policy gives it no credential (no token, no certificate
	// name) and it is not an admin: a caller enters it by naming it
	// (Mooncake's tenant_id, Set.Claim).
	Open bool
	// Unregistered: not in the policy; a caller that named it (Set.Claim)
	// reads and removes in its namespace, and its puts are refused
	// (TENANT_NOT_REGISTERED).
	Unregistered bool
	// Cooperative: its policy gives no one a credential (Set.Cooperative),
	// so any caller may act as any tenant and nothing a caller does is
	// confined beyond its namespace (a node re-reports every object it
	// holds after a master restart, whatever its tenant).
	Cooperative bool
}

// Default is the identity of every caller when no policy is configured.
var Default = &Tenant{Name: "default"}

// policy is the file format (see the package documentation).
type policy struct {
	Version int            `json:"version"`
	Tenants []policyTenant `json:"tenants"`
}

type policyTenant struct {
	Name       string        `json:"name"`
	Admin      bool          `json:"admin"`
	Quota      quantity      `json:"quota"`
	MaxObjects uint64        `json:"max_objects"`
	Tokens     []policyToken `json:"tokens"`
	CertNames  []string      `json:"cert_names"`
}

type policyToken struct {
	Token   string    `json:"token"`
	SHA256  string    `json:"sha256"`
	Expires time.Time `json:"expires"`
}

// quantity is a byte count written as a number or as a string with an
// optional B/KB/MB/GB/TB unit (powers of 1024, as Mooncake's policy).
type quantity uint64

func (q *quantity) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if u, err := strconv.Unquote(s); err == nil {
		s = u
	}
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*q = quantity(n)
	return nil
}

// ParseBytes reads "200GB", "1.5 MB", "4096" or "4096B" (units are powers
// of 1024; "" is 0).
func ParseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "null" {
		return 0, nil
	}
	mult := uint64(1)
	up := strings.ToUpper(s)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(up, u.suffix) {
			mult, s = u.mult, strings.TrimSpace(s[:len(s)-len(u.suffix)])
			break
		}
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n > (1<<63-1)/mult {
			return 0, fmt.Errorf("quota %q too large", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f*float64(mult) >= 1<<63 || f != f {
		return 0, fmt.Errorf("bad byte count %q", s)
	}
	return uint64(f * float64(mult)), nil
}

// Set is one parsed policy: the tenants and the index of their
// credentials. It is immutable; Source swaps whole Sets.
type Set struct {
	tenants []*Tenant
	byName  map[string]*Tenant
	tokens  map[[32]byte]tokenEntry
	certs   map[string]*Tenant
	// declared: no tenant but admins has a credential (Mooncake's policy,
	// which has none): a caller may name a tenant the policy does not
	// list, which it then enters unregistered.
	declared bool
}

type tokenEntry struct {
	sum     [32]byte
	expires time.Time // zero: never
	t       *Tenant
}

// Parse reads a policy (YAML or JSON). A policy may list no tenants
// (Mooncake's "tenants: []": every named tenant is then unregistered).
func Parse(data []byte) (*Set, error) {
	if len(data) > MaxPolicy {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrPolicy, len(data), MaxPolicy)
	}
	var p policy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	if p.Version != 1 {
		return nil, fmt.Errorf("%w: version %d, want 1", ErrPolicy, p.Version)
	}
	if len(p.Tenants) > MaxTenants {
		return nil, fmt.Errorf("%w: %d tenants, at most %d", ErrPolicy, len(p.Tenants), MaxTenants)
	}
	s := &Set{byName: map[string]*Tenant{}, tokens: map[[32]byte]tokenEntry{}, certs: map[string]*Tenant{}, declared: true}
	for _, pt := range p.Tenants {
		if err := checkName(pt.Name); err != nil {
			return nil, err
		}
		if s.byName[pt.Name] != nil {
			return nil, fmt.Errorf("%w: tenant %q twice", ErrPolicy, pt.Name)
		}
		if len(pt.Tokens) > MaxTokens {
			return nil, fmt.Errorf("%w: tenant %q has %d tokens, at most %d", ErrPolicy, pt.Name, len(pt.Tokens), MaxTokens)
		}
		t := &Tenant{Name: pt.Name, Admin: pt.Admin, QuotaBytes: uint64(pt.Quota), QuotaObjects: pt.MaxObjects}
		if !t.Admin {
			t.Namespace = Namespace(t.Name)
			t.Open = len(pt.Tokens) == 0 && len(pt.CertNames) == 0
			s.declared = s.declared && t.Open
		}
		for i, tk := range pt.Tokens {
			var sum [32]byte
			switch {
			case tk.Token != "" && tk.SHA256 != "":
				return nil, fmt.Errorf("%w: tenant %q token %d has both token and sha256", ErrPolicy, pt.Name, i)
			case tk.Token != "":
				if len(tk.Token) < 8 {
					return nil, fmt.Errorf("%w: tenant %q token %d shorter than 8 bytes", ErrPolicy, pt.Name, i)
				}
				if tk.Token[0] == 0 { // the credential frame's marker (EncodeCredential)
					return nil, fmt.Errorf("%w: tenant %q token %d starts with a NUL byte", ErrPolicy, pt.Name, i)
				}
				sum = sha256.Sum256([]byte(tk.Token))
			default:
				b, err := hex.DecodeString(tk.SHA256)
				if err != nil || len(b) != 32 {
					return nil, fmt.Errorf("%w: tenant %q token %d: sha256 is not 64 hex digits", ErrPolicy, pt.Name, i)
				}
				copy(sum[:], b)
			}
			if _, dup := s.tokens[sum]; dup {
				return nil, fmt.Errorf("%w: tenant %q token %d is used twice", ErrPolicy, pt.Name, i)
			}
			s.tokens[sum] = tokenEntry{sum: sum, expires: tk.Expires, t: t}
		}
		for _, cn := range pt.CertNames {
			if cn == "" || s.certs[cn] != nil {
				return nil, fmt.Errorf("%w: tenant %q: empty or repeated cert name %q", ErrPolicy, pt.Name, cn)
			}
			s.certs[cn] = t
		}
		s.byName[t.Name] = t
		s.tenants = append(s.tenants, t)
	}
	coop := s.Cooperative()
	for _, t := range s.tenants {
		t.Cooperative = coop
	}
	return s, nil
}

// CheckName reports whether n is a usable tenant name: Mooncake's rules
// plus "no '/'" (the namespace separator) and a length bound.
func CheckName(n string) error { return checkName(n) }

// checkName applies Mooncake's tenant name rules plus "no '/'" (the
// namespace separator) and a length bound.
func checkName(n string) error {
	switch {
	case n == "":
		return fmt.Errorf("%w: empty tenant name", ErrPolicy)
	case len(n) > 64:
		return fmt.Errorf("%w: tenant name %.16q... longer than 64 bytes", ErrPolicy, n)
	case strings.HasPrefix(n, "_"):
		return fmt.Errorf("%w: tenant name %q starts with '_' (reserved)", ErrPolicy, n)
	case strings.ContainsRune(n, '/'):
		return fmt.Errorf("%w: tenant name %q contains '/'", ErrPolicy, n)
	}
	for _, r := range n {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%w: tenant name %q has a control character", ErrPolicy, n)
		}
	}
	return nil
}

// Authenticate returns the tenant of a bearer token at time now.
func (s *Set) Authenticate(token string, now time.Time) (*Tenant, error) {
	t, _, err := s.AuthenticateUntil(token, now)
	return t, err
}

// AuthenticateUntil is Authenticate that also tells when the token stops
// being valid (zero: never), as Expires, from the same digest.
func (s *Set) AuthenticateUntil(token string, now time.Time) (*Tenant, time.Time, error) {
	if token == "" {
		return nil, time.Time{}, fmt.Errorf("%w: no credential", ErrUnauthenticated)
	}
	sum := sha256.Sum256([]byte(token))
	e, ok := s.tokens[sum]
	// Compare the entry's digest in constant time too (the map found it by
	// the same digest: this keeps the decision itself branch-free on the
	// secret's bytes).
	if !ok || subtle.ConstantTimeCompare(e.sum[:], sum[:]) != 1 {
		return nil, time.Time{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
	}
	if !e.expires.IsZero() && !now.Before(e.expires) {
		return nil, time.Time{}, fmt.Errorf("%w: token of tenant %q expired at %s", ErrUnauthenticated, e.t.Name, e.expires.UTC().Format(time.RFC3339))
	}
	return e.t, e.expires, nil
}

// Expires is when token stops being valid (zero: never, or unknown).
func (s *Set) Expires(token string) time.Time {
	return s.tokens[sha256.Sum256([]byte(token))].expires
}

// Bearer returns the token of an Authorization value "Bearer <token>"
// ("" when it is not one).
func Bearer(authorization string) string {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok {
		return ""
	}
	return tok
}

// ByCert returns the tenant of a verified client certificate's names
// (common name first, then DNS names), nil when none is known.
func (s *Set) ByCert(names ...string) *Tenant {
	for _, n := range names {
		if t := s.certs[n]; t != nil {
			return t
		}
	}
	return nil
}

// Lookup returns the tenant called name, nil when there is none.
func (s *Set) Lookup(name string) *Tenant { return s.byName[name] }

// Tenants lists the tenants in policy order.
func (s *Set) Tenants() []*Tenant { return s.tenants }

// DefaultName is the tenant a caller that names none names (Mooncake's
// default tenant_id).
const DefaultName = "default"

// Claim is the tenant of a caller without a credential that names tenant
// name (Mooncake's tenant_id; "" is DefaultName):
//   - a tenant the policy lists without credentials (Open): that tenant;
//   - a tenant the policy does not list, when no tenant but admins has a
//     credential (a Mooncake policy): that tenant, Unregistered;
//   - otherwise ErrUnauthenticated: a tenant with credentials needs one,
//     and a policy that gives credentials knows no other tenants.
//
// Naming is not authenticating: an open tenant is a namespace and a quota
// among cooperating callers, not a boundary (docs/security.md).
func (s *Set) Claim(name string) (*Tenant, error) {
	if name == "" {
		name = DefaultName
	}
	if t := s.byName[name]; t != nil {
		if t.Open {
			return t, nil
		}
		return nil, fmt.Errorf("%w: tenant %q needs its credential (a token or a client certificate)", ErrUnauthenticated, name)
	}
	if !s.declared {
		return nil, fmt.Errorf("%w: no credential (tenant %q is not open to callers without one)", ErrUnauthenticated, name)
	}
	return s.unregistered(name)
}

// unregistered is the tenant name, which the policy does not list, for a
// caller that may enter it.
func (s *Set) unregistered(name string) (*Tenant, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("%w: tenant id: %v", ErrUnauthenticated, err)
	}
	return &Tenant{Name: name, Namespace: Namespace(name), Unregistered: true, Cooperative: s.Cooperative()}, nil
}

// Cooperative reports whether the policy gives no tenant, admins
// included, a credential (Mooncake's policy): callers are told apart only
// by the tenant they name.
func (s *Set) Cooperative() bool { return s.declared && len(s.tokens) == 0 && len(s.certs) == 0 }

// ClaimAs is the tenant of a caller whose credential is t's that names
// tenant name as well: t itself when name is "", DefaultName or t's own;
// for an admin, the named tenant (an admin may act inside any tenant, as
// it; Unregistered when the policy does not list it); otherwise
// ErrUnauthenticated (a credential names one tenant).
func (s *Set) ClaimAs(t *Tenant, name string) (*Tenant, error) {
	if name == "" || name == DefaultName || name == t.Name {
		return t, nil
	}
	if !t.Admin {
		return nil, fmt.Errorf("%w: the credential is tenant %q's, not tenant %q's", ErrUnauthenticated, t.Name, name)
	}
	if n := s.byName[name]; n != nil {
		if n.Admin {
			return t, nil
		}
		return n, nil
	}
	return s.unregistered(name)
}
