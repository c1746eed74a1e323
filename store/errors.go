package store

import (
	"errors"

	grpcstatus "google.golang.org/grpc/status"

	"github.com/kvcache-go/mooncake/internal/storeerr"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// Errors callers branch on (errors.Is). The master's conditions are the
// sentinels of internal/storeerr and keep Mooncake's numeric codes (Code).
var (
	ErrNotFound       = storeerr.ErrObjectNotFound // no such (complete) object
	ErrExists         = storeerr.ErrObjectExists   // Put of an existing key (use Upsert)
	ErrHasLease       = storeerr.ErrObjectHasLease // Remove of a leased object without force
	ErrNoSpace        = storeerr.ErrNoSpace        // no segment has room, even after eviction
	ErrTooLarge       = storeerr.ErrObjectTooLarge // value larger than any segment
	ErrInvalid        = storeerr.ErrInvalidParams  // bad key, size, option
	ErrLeaseExpired   = storeerr.ErrLeaseExpired   // a read outlived its lease; retry
	ErrCorrupt        = errors.New("store: checksum mismatch")
	ErrNoReplica      = errors.New("store: no replica could be read")
	ErrTransfer       = errors.New("store: transfer failed")
	ErrBufferTooSmall = errors.New("store: destination buffer too small")
	ErrClosed         = errors.New("store: client closed")
	ErrUnauthorized   = errors.New("store: unauthorized") // the master needs the cluster secret (Config.Secret) or a tenant token (Config.Token) for this call
	// ErrQuotaExceeded: the put would take the client's tenant past its
	// bytes or objects quota (Mooncake's TENANT_QUOTA_EXCEEDED, -1700).
	ErrQuotaExceeded = storeerr.ErrTenantQuotaExceeded
	// ErrTenantNotRegistered: the client's tenant is not in the master's
	// policy (a tenant named by Config.TenantID that the policy does not
	// list, or one removed from it): puts are refused (Mooncake's
	// TENANT_NOT_REGISTERED, -1701); reads and removals still work.
	ErrTenantNotRegistered = storeerr.ErrTenantNotRegistered
)

// RemoteError is an error reported by the master: Mooncake's numeric code
// and the master's message. It unwraps to the matching sentinel.
type RemoteError struct {
	Code    int32
	Message string
}

func (e *RemoteError) Error() string { return "store: master: " + e.Message }

// Unwrap returns the sentinel for the code.
func (e *RemoteError) Unwrap() error { return storeerr.ErrorOf(e.Code) }

func statusErr(st *pb.Status) error {
	if st == nil || st.Code == 0 {
		return nil
	}
	return &RemoteError{Code: st.Code, Message: st.Message}
}

// unauthorizedErr is a master call's Unauthenticated status: it is
// ErrUnauthorized for errors.Is and keeps its gRPC status.
type unauthorizedErr struct{ st *grpcstatus.Status }

func (e unauthorizedErr) Error() string                  { return "store: unauthorized: " + e.st.Message() }
func (e unauthorizedErr) Is(target error) bool           { return target == ErrUnauthorized }
func (e unauthorizedErr) GRPCStatus() *grpcstatus.Status { return e.st }
