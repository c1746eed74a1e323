package fastrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// PrefacePipes starts a same-host connection whose frames travel over two
// pipes instead of the socket: the client sends it on the unix socket with
// the pipes' server ends attached (SCM_RIGHTS: the read end of its
// requests' pipe, the write end of its answers' pipe), and a server that
// takes them sends it back; a server that does not closes the connection
// and the client dials again with Preface. The socket stays open beside the
// pipes: each side's process holding it is what the other's liveness check
// looks at (Client.Alive peeks it).
//
// Why: reading from a unix socket wakes the writer's socket waiters with
// "writable" (unix_write_space) after every message, and Go's netpoller
// waits for writability on every socket, so each request the master read
// woke the client process that sent it (asleep, waiting for the answer) for
// nothing, and the client then often took the CPU from the master before it
// had answered: a fifth of the master's CPU with client processes went to
// that wake-up, and as much to being preempted by it. A pipe wakes its writer
// only when it was full.
const PrefacePipes = "MCFRPP01"

// pipeConn is a connection whose frames travel over pipes, beside the unix
// socket that carried them: reads come from r, writes go to w, deadlines
// apply to them, Close closes all three. Its socket gives the addresses and
// the liveness check (peekClosed).
type pipeConn struct {
	*net.UnixConn
	r, w *os.File
}

func (p *pipeConn) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }

func (p *pipeConn) Close() error {
	return errors.Join(p.r.Close(), p.w.Close(), p.UnixConn.Close())
}

func (p *pipeConn) SetReadDeadline(t time.Time) error  { return p.r.SetReadDeadline(t) }
func (p *pipeConn) SetWriteDeadline(t time.Time) error { return p.w.SetWriteDeadline(t) }
func (p *pipeConn) SetDeadline(t time.Time) error {
	return errors.Join(p.r.SetDeadline(t), p.w.SetDeadline(t))
}

// newPipe makes a pipe whose ends are non-blocking (pollable by os.NewFile)
// and closed on exec.
func newPipe() (r, w int, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		return 0, 0, fmt.Errorf("fastrpc: pipe: %w", err)
	}
	return p[0], p[1], nil
}

// dialPipes offers pipes on a new unix connection to the server (sends
// PrefacePipes with their server ends) and returns the connection over
// them once the server took them. conn is closed when it fails.
func dialPipes(ctx context.Context, conn *net.UnixConn) (net.Conn, error) {
	reqR, reqW, err := newPipe()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	respR, respW, err := newPipe()
	if err != nil {
		_ = conn.Close()
		syscall.Close(reqR)
		syscall.Close(reqW)
		return nil, err
	}
	pc := &pipeConn{UnixConn: conn, r: os.NewFile(uintptr(respR), "fastrpc-answers"), w: os.NewFile(uintptr(reqW), "fastrpc-requests")}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	_, _, err = conn.WriteMsgUnix([]byte(PrefacePipes), syscall.UnixRights(reqR, respW), nil)
	// The server holds its ends now (or never will): without closing ours
	// the answers' pipe would never report the server's end.
	syscall.Close(reqR)
	syscall.Close(respW)
	echo := make([]byte, len(PrefacePipes))
	if err == nil {
		_, err = io.ReadFull(conn, echo)
	}
	_ = conn.SetDeadline(time.Time{})
	if err != nil || string(echo) != PrefacePipes {
		_ = pc.Close()
		return nil, fmt.Errorf("fastrpc: no pipes (answered %q): %v", echo, err)
	}
	return pc, nil
}

// acceptPreface reads a same-host connection's preface with the
// descriptors sent with it (PrefacePipes carries two), within sniffTimeout.
// It returns the connection to serve: c itself for Preface, the pipes for
// PrefacePipes (their preface sent back); nil when c must be closed. Any
// descriptor it does not use is closed.
func acceptPreface(c net.Conn) net.Conn {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	_ = uc.SetReadDeadline(time.Now().Add(sniffTimeout))
	defer func() { _ = uc.SetReadDeadline(time.Time{}) }()
	head := make([]byte, len(Preface))
	oob := make([]byte, syscall.CmsgSpace(2*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(head, oob)
	var fds []int
	if err == nil && oobn > 0 {
		fds = parseRights(oob[:oobn])
	}
	if err == nil && n < len(head) {
		_, err = io.ReadFull(uc, head[n:])
	}
	closeAll := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	switch {
	case err != nil:
		closeAll()
		return nil
	case string(head) == Preface && len(fds) == 0:
		return c
	case string(head) == PrefacePipes && len(fds) == 2:
		for _, fd := range fds {
			if syscall.SetNonblock(fd, true) != nil {
				closeAll()
				return nil
			}
		}
		pc := &pipeConn{UnixConn: uc, r: os.NewFile(uintptr(fds[0]), "fastrpc-requests"), w: os.NewFile(uintptr(fds[1]), "fastrpc-answers")}
		if _, err := uc.Write([]byte(PrefacePipes)); err != nil {
			_ = pc.r.Close()
			_ = pc.w.Close()
			return nil
		}
		return pc
	}
	closeAll()
	return nil
}

// parseRights returns the descriptors of the SCM_RIGHTS messages in oob.
func parseRights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}
