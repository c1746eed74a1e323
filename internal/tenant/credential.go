package tenant

import (
	"errors"
	"fmt"
)

// A connection's credential frame (fastrpc's MethodHello payload) carries
// a bearer token, and optionally the tenant the caller names (Mooncake's
// tenant_id):
//
//	token                                  no tenant named
//	0x00 'T' | len u8 | tenant | token      tenant named (token may be empty)
//
// A token never starts with a NUL byte (Parse refuses one), so the two
// forms cannot be confused. The codec is hand-written: two fields, one
// frame, decoded once per connection; DecodeCredential is fuzzed.

// IDHeader is the gRPC metadata key of the tenant a caller names.
const IDHeader = "mooncake-tenant-id"

// MaxCredential bounds a credential frame.
const MaxCredential = 64 << 10

// ErrBadCredential: a credential frame that does not decode.
var ErrBadCredential = errors.New("malformed credential frame")

// EncodeCredential is the credential frame of token and the tenant named
// (tenant "" names none: the frame is the token itself).
func EncodeCredential(token, tenant string) []byte {
	if tenant == "" {
		return []byte(token)
	}
	b := make([]byte, 0, 3+len(tenant)+len(token))
	b = append(b, 0, 'T', byte(len(tenant)))
	b = append(b, tenant...)
	return append(b, token...)
}

// DecodeCredential reads a credential frame: the token and the tenant it
// names ("" for none).
func DecodeCredential(b []byte) (token, tenant string, err error) {
	if len(b) > MaxCredential {
		return "", "", fmt.Errorf("%w: %d bytes, at most %d", ErrBadCredential, len(b), MaxCredential)
	}
	if len(b) == 0 || b[0] != 0 {
		return string(b), "", nil
	}
	if len(b) < 3 || b[1] != 'T' {
		return "", "", fmt.Errorf("%w: unknown form", ErrBadCredential)
	}
	n := int(b[2])
	if n == 0 || len(b) < 3+n {
		return "", "", fmt.Errorf("%w: tenant name of %d bytes in a %d-byte frame", ErrBadCredential, n, len(b))
	}
	return string(b[3+n:]), string(b[3 : 3+n]), nil
}
