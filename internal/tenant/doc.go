// Package tenant is who may use the store and how much of it: tenants with
// bearer tokens (and optionally mTLS certificate names), an admin role for
// the calls that act on the whole cluster, and per-tenant quotas of bytes
// and objects. It is a pure core: it parses a policy, answers "who is this
// credential" and names each tenant's key namespace; the master's shells
// (internal/masterserver) read the credentials off the wire and the master
// core (internal/master) keeps the per-tenant accounts.
//
// # Policy
//
// Parse reads a policy, YAML or JSON (a superset of Mooncake's tenant quota
// policy: version 1, tenants with a name and a quota in bytes with optional
// B/KB/MB/GB/TB units):
//
//	version: 1
//	tenants:
//	  - name: tenant-a
//	    quota: 200GB            # memory bytes (0 or absent: no byte quota)
//	    max_objects: 1000000    # objects (0 or absent: no object quota)
//	    tokens:
//	      - token: "long random string"
//	      - sha256: "hex of the SHA-256 of a token"   # keeps the token off disk
//	        expires: 2027-01-01T00:00:00Z
//	    cert_names: [client-a]  # mTLS: certificate common name or DNS SAN
//	  - name: ops
//	    admin: true
//	    tokens: [{token: "another"}]
//
// Names follow Mooncake's rules (non-empty, unique, not starting with '_',
// no control characters) and may not contain '/'; at most MaxTenants
// tenants, none at all being allowed (Mooncake's "tenants: []"). A token may belong to one tenant only. Unknown fields are
// refused, so a misspelt field is an error rather than a silent default.
//
// # Credentials
//
// Set.Authenticate maps a bearer token to its tenant: the token's SHA-256
// looks the entry up and is then compared in constant time, so neither the
// lookup nor the comparison reveals how much of a guess was right; an
// expired token fails like a wrong one (ErrUnauthenticated) with its own
// message. Set.ByCert maps a verified client certificate's names.
//
// # Naming a tenant (Mooncake's tenant_id)
//
// A caller may name its tenant. Set.Claim decides for a caller without a
// credential: a tenant the policy lists without tokens or certificate
// names (Open) is entered by naming it; under a policy that gives no
// tenant but admins a credential (Mooncake's), a tenant it does not list
// is entered Unregistered (reads and removals in its namespace, puts
// refused); anything else is ErrUnauthenticated. Set.ClaimAs decides for
// a caller with a credential: a tenant's token names its own tenant only,
// an admin may name any. A policy with no credentials at all is
// Cooperative (its tenants are namespaces and quotas, not boundaries).
// EncodeCredential / DecodeCredential are the fastrpc credential frame
// that carries the token and the name (DecodeCredential is fuzzed);
// IDHeader is the gRPC metadata key of the name.
//
// # Editing
//
// SetQuota, TakeTenant, RestoreTenant and RemoveTenant rewrite a policy's
// bytes (every field kept, comments not); Source.Edit applies one to the
// policy where it is kept, through a Saver (FileSaver: a temporary file
// renamed over the policy), and puts the result in force.
//
// # Namespaces
//
// Every non-admin tenant's keys live under Namespace(name), an internal
// prefix ("\x00t/NAME/") no user key of another tenant can produce, since
// the master prepends it to every key a tenant sends. Admin callers, and
// every caller when no policy is configured, use the raw key space (no
// prefix): the behaviour without tenants is unchanged. Split reverses it
// for accounting; InNamespace checks a key against one tenant in place.
//
// # Rotation
//
// Source holds the current Set and replaces it atomically: Reload re-reads
// it through a Loader (a file: FileLoader), Run polls the loader until its
// context ends, each read bounded by a deadline. A policy that fails to
// parse leaves the current Set in force (the error goes to the
// OnError callback). Generation increases on every replacement, so holders
// of a decision (a fastrpc connection authenticated once) can tell cheaply
// that they must check their credential again.
package tenant
