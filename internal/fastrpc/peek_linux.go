package fastrpc

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// peekClosed checks, without blocking or consuming data, whether the peer
// closed or reset conn: io.EOF or the socket's error, nil when it is open
// (data waiting, or none yet).
func peekClosed(conn net.Conn) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		case err != nil:
			perr = err
		case n == 0:
			perr = io.EOF
		}
		return true
	}); err != nil {
		return err
	}
	return perr
}
