//go:build !linux

package fastrpc

import (
	"context"
	"errors"
	"net"
)

// PrefacePipes: see the Linux version; pipes are not offered here.
const PrefacePipes = "MCFRPP01"

type pipeConn struct{ net.Conn }

func dialPipes(context.Context, *net.UnixConn) (net.Conn, error) {
	return nil, errors.New("fastrpc: no pipes off Linux")
}

// acceptPreface is never called off Linux (no same-host listener).
func acceptPreface(net.Conn) net.Conn { return nil }
