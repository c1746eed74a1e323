package mooncakestore

import (
	"errors"

	"github.com/kvcache-go/mooncake/store"
)

// The errors of Mooncake's binding. A failed call returns one of them,
// wrapping the store's own error (errors.Is works for both).
var (
	ErrStoreNil         = errors.New("mooncakestore: store handle is nil")
	ErrSetupFailed      = errors.New("mooncakestore: setup failed")
	ErrInitAllFailed    = errors.New("mooncakestore: init_all failed")
	ErrHealthCheck      = errors.New("mooncakestore: health check failed")
	ErrPut              = errors.New("mooncakestore: put failed")
	ErrGet              = errors.New("mooncakestore: get failed")
	ErrRemove           = errors.New("mooncakestore: remove failed")
	ErrExist            = errors.New("mooncakestore: existence check failed")
	ErrGetSize          = errors.New("mooncakestore: get size failed")
	ErrRegisterBuffer   = errors.New("mooncakestore: register buffer failed")
	ErrUnregisterBuffer = errors.New("mooncakestore: unregister buffer failed")
	ErrBatchOp          = errors.New("mooncakestore: batch operation failed")
	ErrHostname         = errors.New("mooncakestore: get hostname failed")
	ErrInvalidArgument  = errors.New("mooncakestore: invalid argument")
)

// Mooncake's numeric error codes (mooncake-store's ErrorCode) of the batch
// results.
const (
	codeInternal       = -1
	codeBufferOverflow = -10
	codeNoSpace        = -200
	codeInvalidParams  = -600
	codeTooLarge       = -601
	codeNotFound       = -704
	codeExists         = -705
	codeHasLease       = -706
	codeLeaseExpired   = -707
	codeTransferFail   = -800
)

// code is Mooncake's numeric code of a store error.
func code(err error) int64 {
	var re *store.RemoteError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &re):
		return int64(re.Code)
	case errors.Is(err, store.ErrNotFound):
		return codeNotFound
	case errors.Is(err, store.ErrExists):
		return codeExists
	case errors.Is(err, store.ErrHasLease):
		return codeHasLease
	case errors.Is(err, store.ErrNoSpace):
		return codeNoSpace
	case errors.Is(err, store.ErrTooLarge):
		return codeTooLarge
	case errors.Is(err, store.ErrInvalid):
		return codeInvalidParams
	case errors.Is(err, store.ErrLeaseExpired):
		return codeLeaseExpired
	case errors.Is(err, store.ErrBufferTooSmall):
		return codeBufferOverflow
	case errors.Is(err, store.ErrTransfer), errors.Is(err, store.ErrNoReplica), errors.Is(err, store.ErrCorrupt):
		return codeTransferFail
	}
	return codeInternal
}

// wrap returns sentinel wrapping err (nil for nil).
func wrap(sentinel, err error) error {
	if err == nil {
		return nil
	}
	return &callError{sentinel, err}
}

type callError struct{ sentinel, cause error }

func (e *callError) Error() string   { return e.sentinel.Error() + ": " + e.cause.Error() }
func (e *callError) Unwrap() []error { return []error{e.sentinel, e.cause} }
