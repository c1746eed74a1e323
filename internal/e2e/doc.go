// Package e2e holds the end-to-end tests of prefill/decode disaggregation:
// proxy + prefill + decode engines in this process (internal/cluster) and as
// separate processes of the real binary, checking that greedy output through
// the proxy equals a colocated engine token for token (also with partial and
// full prefix hits on decode), and the failure scenarios (pull timeout with
// recompute and fail policies, prefill freeing after its abort timeout,
// incompatible peers, client disconnect before and during the pull, a
// prefill killed mid-request, a dead prefill replaced and put back in
// rotation). Every scenario ends by asserting that no KV block is leaked on
// any engine.
package e2e
