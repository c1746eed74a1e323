package master

import "github.com/kvcache-go/mooncake/internal/storeerr"

// Sentinel errors of the master, defined in package storeerr (shared with
// the store client). Callers branch on them with errors.Is; the gRPC shell
// maps each to Mooncake's numeric error code with Code.
var (
	ErrInvalidParams   = storeerr.ErrInvalidParams
	ErrObjectNotFound  = storeerr.ErrObjectNotFound
	ErrObjectExists    = storeerr.ErrObjectExists
	ErrObjectHasLease  = storeerr.ErrObjectHasLease
	ErrNoSpace         = storeerr.ErrNoSpace
	ErrObjectTooLarge  = storeerr.ErrObjectTooLarge
	ErrSegmentNotFound = storeerr.ErrSegmentNotFound
	ErrSegmentExists   = storeerr.ErrSegmentExists
	ErrLeaseExpired    = storeerr.ErrLeaseExpired
	ErrNotOwner        = storeerr.ErrNotOwner
)

// Mooncake's numeric error codes (see package storeerr).
const (
	CodeOK                = storeerr.CodeOK
	CodeInternal          = storeerr.CodeInternal
	CodeSegmentNotFound   = storeerr.CodeSegmentNotFound
	CodeSegmentExists     = storeerr.CodeSegmentExists
	CodeNoAvailableHandle = storeerr.CodeNoAvailableHandle
	CodeInvalidParams     = storeerr.CodeInvalidParams
	CodeObjectTooLarge    = storeerr.CodeObjectTooLarge
	CodeNotOwner          = storeerr.CodeNotOwner
	CodeObjectNotFound    = storeerr.CodeObjectNotFound
	CodeObjectExists      = storeerr.CodeObjectExists
	CodeObjectHasLease    = storeerr.CodeObjectHasLease
	CodeLeaseExpired      = storeerr.CodeLeaseExpired
)

// Code maps an error to Mooncake's numeric code (storeerr.Code).
func Code(err error) int32 { return storeerr.Code(err) }

// ErrorOf is the inverse of Code (storeerr.ErrorOf).
func ErrorOf(code int32) error { return storeerr.ErrorOf(code) }
