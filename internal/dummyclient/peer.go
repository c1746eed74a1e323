package dummyclient

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Who may be on the other end of the socket. A socket in the abstract
// namespace has no file permissions: any process of the host's network
// namespace may connect to it, or bind its name first. A dummy acts with
// the real client's credentials (its tenant's keys, its grants), and a
// real client is handed the dummies' values. So each side checks the
// other's user id (SO_PEERCRED, set by the kernel at connect): the real
// client serves a dummy of its own user, root, or one of Config.AllowUIDs;
// a dummy talks to a real client of its own user, root, or one listed in
// $MOONCAKE_REAL_CLIENT_UIDS.

// ErrPeerNotAllowed: the process at the other end of the socket runs as a
// user this side does not trust.
var ErrPeerNotAllowed = errors.New("dummyclient: peer process's user not allowed")

// RealClientUIDsEnv lists, comma-separated, the users besides its own and
// root whose real client a dummy client talks to.
const RealClientUIDsEnv = "MOONCAKE_REAL_CLIENT_UIDS"

// peerUID is the user id of the process at the other end of c.
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return cred.Uid, nil
}

// checkPeer returns nil when c's peer runs as this process's user, root or
// one of allow.
func checkPeer(c *net.UnixConn, allow []uint32) error {
	uid, err := peerUID(c)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPeerNotAllowed, err)
	}
	if uid == uint32(os.Geteuid()) || uid == 0 || slices.Contains(allow, uid) {
		return nil
	}
	return fmt.Errorf("%w: uid %d", ErrPeerNotAllowed, uid)
}

// ParseUIDs parses a comma-separated list of user ids ("" is none).
func ParseUIDs(s string) ([]uint32, error) {
	var out []uint32
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("dummyclient: user id %q: %w", f, err)
		}
		out = append(out, uint32(n))
	}
	return out, nil
}
