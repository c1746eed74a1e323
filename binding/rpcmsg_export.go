package main

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"time"
	"unsafe"
)

var (
	rpcServers = newHandles[*rpcServer]()
	rpcClients = newHandles[*rpcClient]()
)

func rpcTimeout(s C.int64_t) time.Duration {
	if s <= 0 {
		return 30 * time.Second
	}
	return time.Duration(s) * time.Second
}

// mc_rpc_server_open listens on addr ("host:port", port 0 picks one) for
// RPC messages and returns the server's handle.
//
//export mc_rpc_server_open
func mc_rpc_server_open(addr *C.char, timeoutSeconds C.int64_t) C.int64_t {
	return C.int64_t(guard("rpc server open", func() (int64, error) {
		s, err := listenRPC(goString(addr), rpcTimeout(timeoutSeconds))
		if err != nil {
			return 0, err
		}
		return rpcServers.add(s), nil
	}))
}

// mc_rpc_server_port returns the port server h listens on.
//
//export mc_rpc_server_port
func mc_rpc_server_port(h C.int64_t) C.int64_t {
	return C.int64_t(guard("rpc server port", func() (int64, error) {
		s, ok := rpcServers.get(int64(h))
		if !ok {
			return 0, errBadHandle
		}
		return int64(s.port()), nil
	}))
}

// mc_rpc_server_close stops server h (its queued messages are dropped).
//
//export mc_rpc_server_close
func mc_rpc_server_close(h C.int64_t) C.int64_t {
	return C.int64_t(guard("rpc server close", func() (int64, error) {
		s, ok := rpcServers.remove(int64(h))
		if !ok {
			return 0, errBadHandle
		}
		return 0, s.close()
	}))
}

// mc_rpc_recv waits up to waitMs for the next message of server h. It
// returns 0 when none came, else the length of the message handed through
// out (kind u8 | source length u16 LE | source | data; free with mc_free).
//
//export mc_rpc_recv
func mc_rpc_recv(h C.int64_t, waitMs C.int64_t, out *unsafe.Pointer) C.int64_t {
	var msg []byte
	s, ok := rpcServers.get(int64(h))
	if !ok {
		return codeInvalidParams // closed: the receiving loop's way out, not worth a log line
	}
	rc := guard("rpc recv", func() (int64, error) {
		m, ok, err := s.recv(time.Duration(max(0, int64(waitMs))) * time.Millisecond)
		if errors.Is(err, errBadHandle) {
			return codeInvalidParams, nil
		}
		if err != nil || !ok {
			return 0, err
		}
		msg = encodeRPCMsg(m)
		return 1, nil
	})
	if rc <= 0 {
		return C.int64_t(rc)
	}
	return cOut(msg, out)
}

// mc_rpc_client_open returns a client handle keeping up to pool idle
// connections per target; sends time out after timeoutSeconds (plus a
// nanosecond per byte).
//
//export mc_rpc_client_open
func mc_rpc_client_open(pool, timeoutSeconds C.int64_t) C.int64_t {
	return C.int64_t(guard("rpc client open", func() (int64, error) {
		return rpcClients.add(newRPCClient(int(pool), rpcTimeout(timeoutSeconds))), nil
	}))
}

// mc_rpc_client_close closes client h and its idle connections.
//
//export mc_rpc_client_close
func mc_rpc_client_close(h C.int64_t) C.int64_t {
	return C.int64_t(guard("rpc client close", func() (int64, error) {
		c, ok := rpcClients.remove(int64(h))
		if !ok {
			return 0, errBadHandle
		}
		return 0, c.close()
	}))
}

// mc_rpc_send delivers n bytes at p as a message of kind (1 data, 2 tensor)
// to target: 0 once the target queued it, -900 when it could not.
//
//export mc_rpc_send
func mc_rpc_send(h C.int64_t, target *C.char, kind C.int64_t, p unsafe.Pointer, n C.uint64_t) C.int64_t {
	return C.int64_t(guard("rpc send", func() (int64, error) {
		c, ok := rpcClients.get(int64(h))
		if !ok {
			return 0, errBadHandle
		}
		if kind != rpcKindData && kind != rpcKindTensor {
			return 0, errInvalid("unknown message kind")
		}
		b, err := view(p, n)
		if err != nil {
			return 0, err
		}
		return 0, c.send(goString(target), byte(kind), b)
	}))
}
