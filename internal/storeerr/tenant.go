package storeerr

import "errors"

// Conditions of tenant quotas (Mooncake's tenant quota error codes).
var (
	// ErrTenantQuotaExceeded: the put would take the tenant past its bytes
	// or objects quota; nothing was allocated.
	ErrTenantQuotaExceeded = errors.New("tenant quota exceeded")
	// ErrTenantNotRegistered: the key's tenant has no policy (it was
	// removed from the tenant file); reads and removals still work.
	ErrTenantNotRegistered = errors.New("tenant not registered")
)

// Their codes (Mooncake's TENANT_QUOTA_EXCEEDED, TENANT_NOT_REGISTERED).
const (
	CodeTenantQuotaExceeded = -1700
	CodeTenantNotRegistered = -1701
)

func init() {
	codeTable = append(codeTable,
		struct {
			err  error
			code int32
		}{ErrTenantQuotaExceeded, CodeTenantQuotaExceeded},
		struct {
			err  error
			code int32
		}{ErrTenantNotRegistered, CodeTenantNotRegistered})
}
