//go:build !linux

package fastrpc

import "net"

// peekClosed cannot check the socket here: a closed connection is noticed
// by the next call.
func peekClosed(net.Conn) error { return nil }
