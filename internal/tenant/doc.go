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
// tenants. A token may belong to one tenant only. Unknown fields are
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
