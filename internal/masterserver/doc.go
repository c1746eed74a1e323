// Package masterserver is the store master's process shell around the core
// (package internal/master, which does no I/O): it serves the core over
// gRPC and fastrpc, serves the admin HTTP API, and drives the core's Tick.
// It uses only the core's exported API.
//
// Server (server.go) is the process shell: the gRPC services (service.go,
// MasterService, and taskservice.go, MasterTasks, in internal/storepb), the
// same service's hot calls (puts, replica lists, existence and their
// batches) on fastrpc connections to the gRPC port (fast.go, package
// internal/fastrpc, which splits the listener by the connections' first
// bytes), the HTTP admin/metrics API (admin.go, written with
// internal/httpjson; admin_summary.go is GET /api/summary, the data of the
// dashboard page internal/dashboard serves at /dashboard/) and the ticker
// that drives
// Tick. NewServer builds it without binding or starting anything;
// Run(ctx, grpcLn, httpLn) serves on listeners the caller owns until ctx
// ends (ServerConfig.Listen binds the configured addresses); Start and
// Close run it in the background for tests and embedders.
//
// With ServerConfig.Secret set (auth.go), the RPCs NeedsSecret names (remove
// all, remove by regex, unmount) need gRPC metadata "authorization: Bearer
// <secret>" and fail with codes.Unauthenticated otherwise; RequireSecret
// does the same for the admin HTTP API's non-GET requests (401, OpenAI
// error shape). Reads and the data path stay open.
//
// With ServerConfig.Tenants (tenants.go; package internal/tenant holds the
// policy) every call needs a credential: a bearer token in gRPC metadata,
// a credential frame once per fastrpc connection (fastrpc.Authenticator),
// or a client certificate a tenant names (the token resolved last is
// remembered with the policy that resolved it, until it expires); the
// caller's tenant rides in the call's context (a fastrpc connection's
// handler binds its namespace once) and the service scopes every key to
// its namespace (a
// tenant sees, lists, counts and removes only its own keys; another's read
// as absent). The cluster secret and admin tenants use the raw key space.
// The core gets the tenants' quotas (master.SetTenantQuotas); the object
// event sink sees raw-key-space events only; the admin HTTP API needs the
// admin role. With ServerConfig.TLS the gRPC listener is wrapped in
// crypto/tls before the fastrpc split (gRPC sees the handshake's state
// through tlsCreds), and the same-host fastrpc socket is not served.
// docs/security.md is the manual.
//
// With ServerConfig.Grants (a grant.Keyring), the service signs a data-path
// grant for exactly the extents it hands out, at the wire conversion
// (grants.go): WRITE with each placement (PutStart, a PutCommit's next
// slot; for PutTimeout), READ with each replica list (until the read
// lease ends), WRITE on tombstone headers, READ/WRITE on task sources and
// targets (until the task's deadline). Grants are signed per call;
// placements' and replica lists' with the expiry rounded down to a step
// and a nonce derived from the rest, so the same extent and mode get the
// same bytes within a step (a hot object's readers, an upsert's reused
// slot). Storage nodes holding
// the same keys refuse transfers without them. The core knows nothing of
// grants.
package masterserver
