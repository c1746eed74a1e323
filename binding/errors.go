package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// Mooncake's error codes, the only failure values that cross the ABI.
const (
	codeOK               = 0
	codeInternal         = -1
	codeBufferOverflow   = -10
	codeSegmentNotFound  = -101
	codeNoHandle         = -200
	codeInvalidParams    = -600
	codeObjectNotFound   = -704
	codeObjectExists     = -705
	codeObjectHasLease   = -706
	codeLeaseExpired     = -707
	codeTransferFail     = -800
	codeRPCFail          = -900
	codeRPCTimeout       = -901
	codeNotInitialized   = -1
	codeCheckTimeout     = -2 // transfer_check_status: timed out
	codeCheckFailed      = -1 // transfer_check_status: failed
	codeCheckCompleted   = 1  // transfer_check_status: done
	codeCheckStillActive = 0  // transfer_check_status: running
)

// Mooncake's tenant quota codes.
const (
	codeTenantQuotaExceeded = -1700 // TENANT_QUOTA_EXCEEDED
	codeTenantNotRegistered = -1701 // TENANT_NOT_REGISTERED
)

// Sentinel errors of the binding layer itself.
var (
	errInvalidParams = errors.New("invalid parameters")
	errBadHandle     = errors.New("unknown or closed handle")
	errNotRegistered = errors.New("local range is not inside registered memory")
)

func errInvalid(msg string) error { return fmt.Errorf("%w: %s", errInvalidParams, msg) }

// codeMapping turns an error into a Mooncake code. Entries are checked in
// order with errors.Is; store.go and engine.go append theirs in init.
type codeMapping struct {
	err  error
	code int64
}

var codeTable = []codeMapping{
	{errInvalidParams, codeInvalidParams},
	{errBadHandle, codeInvalidParams},
	{errNotRegistered, codeInvalidParams},
	{context.DeadlineExceeded, codeRPCTimeout},
}

// coder is implemented by errors that carry their own Mooncake code.
type coder interface{ MooncakeCode() int }

// codeHooks map errors the table cannot match by identity (an error type
// carrying a code, a gRPC status); the first that reports ok wins.
var codeHooks []func(error) (int64, bool)

// codeOf returns the Mooncake code of err (0 for nil, -1 when unknown).
func codeOf(err error) int64 {
	if err == nil {
		return codeOK
	}
	var c coder
	if errors.As(err, &c) {
		return int64(c.MooncakeCode())
	}
	for _, m := range codeTable {
		if errors.Is(err, m.err) {
			return m.code
		}
	}
	for _, h := range codeHooks {
		if c, ok := h(err); ok {
			return c
		}
	}
	return codeInternal
}

var (
	logger  = newLogger()
	errMu   sync.Mutex
	lastErr string
)

// newLogger logs to stderr at the level named by MC_LOG_LEVEL (default warn).
func newLogger() *slog.Logger {
	level := slog.LevelWarn
	switch strings.ToLower(os.Getenv("MC_LOG_LEVEL")) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "error":
		level = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("component", "libmooncake")
}

func lastError() string {
	errMu.Lock()
	defer errMu.Unlock()
	return lastErr
}

// record logs err for op, remembers it for mc_last_error and returns its code.
// quiet errors (an expected "not found") are logged at debug level. The
// remembered reason is err's text alone: the caller (python/mooncake) names
// the operation it called, so the message says it once.
func record(op string, err error) int64 {
	code := codeOf(err)
	msg := err.Error()
	errMu.Lock()
	lastErr = msg
	errMu.Unlock()
	level := slog.LevelWarn
	if code == codeObjectNotFound {
		level = slog.LevelDebug
	}
	logger.Log(context.Background(), level, "call failed", "op", op, "code", code, "err", err)
	return code
}

// guard runs fn, converting an error or a panic into a Mooncake code, so
// nothing ever unwinds into the C caller.
func guard(op string, fn func() (int64, error)) (rc int64) {
	defer func() {
		if r := recover(); r != nil {
			rc = record(op, fmt.Errorf("internal panic: %v", r))
			if rc >= 0 {
				rc = codeInternal
			}
		}
	}()
	v, err := fn()
	if err != nil {
		rc = record(op, err)
		if rc >= 0 {
			rc = codeInternal
		}
		return rc
	}
	return v
}
