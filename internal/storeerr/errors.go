package storeerr

import "errors"

// Sentinel errors of the store master. Callers branch on them with
// errors.Is; Code and ErrorOf map them to and from Mooncake's numeric error
// codes in one table.
var (
	ErrInvalidParams   = errors.New("invalid parameters")
	ErrObjectNotFound  = errors.New("object not found")
	ErrObjectExists    = errors.New("object already exists")
	ErrObjectHasLease  = errors.New("object has a lease")
	ErrNoSpace         = errors.New("no space available")
	ErrObjectTooLarge  = errors.New("object larger than any segment")
	ErrSegmentNotFound = errors.New("segment not found")
	ErrSegmentExists   = errors.New("segment already mounted")
	ErrLeaseExpired    = errors.New("lease expired")
	ErrNotOwner        = errors.New("not the owner of this put")
)

// Mooncake's numeric error codes (shared/reference/mooncake.md, section 2).
const (
	CodeOK                = 0
	CodeInternal          = -1
	CodeSegmentNotFound   = -101
	CodeSegmentExists     = -102
	CodeNoAvailableHandle = -200
	CodeInvalidParams     = -600
	CodeObjectTooLarge    = -601
	CodeNotOwner          = -602
	CodeObjectNotFound    = -704
	CodeObjectExists      = -705
	CodeObjectHasLease    = -706
	CodeLeaseExpired      = -707
)

var codeTable = []struct {
	err  error
	code int32
}{
	{ErrSegmentNotFound, CodeSegmentNotFound},
	{ErrSegmentExists, CodeSegmentExists},
	{ErrNoSpace, CodeNoAvailableHandle},
	{ErrInvalidParams, CodeInvalidParams},
	{ErrObjectTooLarge, CodeObjectTooLarge},
	{ErrNotOwner, CodeNotOwner},
	{ErrObjectNotFound, CodeObjectNotFound},
	{ErrObjectExists, CodeObjectExists},
	{ErrObjectHasLease, CodeObjectHasLease},
	{ErrLeaseExpired, CodeLeaseExpired},
}

// ErrInternal is what ErrorOf returns for a code outside the table
// (CodeInternal included).
var ErrInternal = errors.New("internal error")

// Code maps an error to Mooncake's numeric code (0 for nil, -1 for an error
// that is not one of the sentinels).
func Code(err error) int32 {
	if err == nil {
		return CodeOK
	}
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return CodeInternal
}

// ErrorOf is the inverse of Code: the sentinel for a code (nil for 0, and
// ErrInternal for unknown codes).
func ErrorOf(code int32) error {
	if code == CodeOK {
		return nil
	}
	for _, e := range codeTable {
		if e.code == code {
			return e.err
		}
	}
	return ErrInternal
}
