package storeerr

import "errors"

// Conditions of the master's copy and move tasks (Mooncake's task manager).
var (
	ErrTaskNotFound = errors.New("task not found")
	ErrTaskLimit    = errors.New("too many pending tasks")
	// ErrUnavailable is Mooncake's UNAVAILABLE_IN_CURRENT_STATUS: the request
	// is valid but its target cannot take it now (a draining segment).
	ErrUnavailable = errors.New("unavailable in the current status")
)

// Their codes.
const (
	CodeUnavailable  = -1010
	CodeTaskNotFound = -1400
	CodeTaskLimit    = -1401
)

func init() {
	codeTable = append(codeTable,
		struct {
			err  error
			code int32
		}{ErrTaskNotFound, CodeTaskNotFound},
		struct {
			err  error
			code int32
		}{ErrTaskLimit, CodeTaskLimit},
		struct {
			err  error
			code int32
		}{ErrUnavailable, CodeUnavailable},
	)
}
