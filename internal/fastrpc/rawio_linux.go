package fastrpc

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a socket with raw system calls
// (syscall.RawSyscall) through the connection's syscall.RawConn: the
// socket is non-blocking, so a call never blocks in the kernel, and a read
// or write that would block waits in the netpoller as net.Conn's do
// (deadlines included). Why: a Go system call (syscall.Syscall) enters the
// scheduler's syscall state, and the first one after the process was idle
// wakes the runtime's sysmon thread, which runs, sleeps 20 us and goes
// back to sleep: a process that does one call at a time and idles between
// them (a client process, one per engine worker) paid a thread wake-up
// and two context switches more per call, about a quarter of its CPU.
type rawIO struct {
	rrc  syscall.RawConn // reads
	wrc  syscall.RawConn // writes (the same but for pipes)
	rd   rawOp           // the read side's state (one reader at a time)
	wr   rawOp           // the write side's
	read func(fd uintptr) bool
	wrt  func(fd uintptr) bool
}

// rawOp is one direction's buffer and outcome, kept in rawIO so that the
// functions passed to RawConn are made once, not per call.
type rawOp struct {
	p     []byte
	n     int
	errno syscall.Errno
}

// newRawIO returns raw system-call I/O of c (of its pipes for a
// pipeConn), or c itself when it is not a plain socket (a TLS connection,
// a test's net.Pipe). One reader and one writer may use it at a time.
func newRawIO(c net.Conn) io.ReadWriter {
	var rrc, wrc syscall.RawConn
	var err1, err2 error
	switch x := c.(type) {
	case *pipeConn:
		rrc, err1 = x.r.SyscallConn()
		wrc, err2 = x.w.SyscallConn()
	case syscall.Conn:
		rrc, err1 = x.SyscallConn()
		wrc = rrc
	default:
		return c
	}
	if err1 != nil || err2 != nil {
		return c
	}
	r := &rawIO{rrc: rrc, wrc: wrc}
	r.read, r.wrt = r.doRead, r.doWrite
	return r
}

func (r *rawIO) doRead(fd uintptr) bool {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(r.rd.p))), uintptr(len(r.rd.p)))
	if e == syscall.EAGAIN {
		return false // wait in the netpoller until readable
	}
	if e == syscall.EINTR {
		return r.doRead(fd)
	}
	r.rd.n, r.rd.errno = int(n), e
	return true
}

func (r *rawIO) doWrite(fd uintptr) bool {
	for r.wr.n < len(r.wr.p) {
		b := r.wr.p[r.wr.n:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		switch e {
		case 0:
			r.wr.n += int(n)
		case syscall.EAGAIN:
			return false // wait in the netpoller until writable
		case syscall.EINTR:
		default:
			r.wr.errno = e
			return true
		}
	}
	return true
}

// Read reads into p as net.Conn's Read does: io.EOF at the end of the
// stream, the deadline's error (os.ErrDeadlineExceeded) when it passes.
func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rd = rawOp{p: p}
	err := r.rrc.Read(r.read)
	n, errno := r.rd.n, r.rd.errno
	r.rd.p = nil
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: "raw", Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p (or fails).
func (r *rawIO) Write(p []byte) (int, error) {
	r.wr = rawOp{p: p}
	err := r.wrc.Write(r.wrt)
	n, errno := r.wr.n, r.wr.errno
	r.wr.p = nil
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, &net.OpError{Op: "write", Net: "raw", Err: errno}
	}
	return n, nil
}
