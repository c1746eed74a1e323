package fastrpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Preface is what a client sends first on a new connection.
const Preface = "MCFRPC01"

// MaxFrame bounds a frame's length field (method or status, id, payload).
const MaxFrame = 64 << 20

// headerLen is the length field plus the method or status byte and the id.
const headerLen = 4 + 1 + 8

// Response statuses.
const (
	StatusOK            = 0
	StatusUnknownMethod = 1
	StatusBadRequest    = 2
	// StatusUnauthenticated answers a connection's credential frame that a
	// server with an Authenticator refused, or a first request without one;
	// the server then closes the connection.
	StatusUnauthenticated = 3
)

// MethodHello is the credential frame: its payload is the connection's
// credential (a bearer token), sent once, first, by a client that has one.
// A server without an Authenticator answers it StatusOK and ignores it.
const MethodHello uint8 = 0xFF

// ErrFrame is a malformed frame: too long or too short.
var ErrFrame = errors.New("fastrpc: bad frame")

// appendFrame appends one frame to b.
func appendFrame(b []byte, kind uint8, id uint64, payload []byte) []byte {
	h := frameHeader(kind, id, len(payload))
	return append(append(b, h[:]...), payload...)
}

// frameHeader is the header of a frame with a payload of n bytes.
func frameHeader(kind uint8, id uint64, n int) (h [headerLen]byte) {
	binary.LittleEndian.PutUint32(h[:4], uint32(1+8+n))
	h[4] = kind
	binary.LittleEndian.PutUint64(h[5:], id)
	return h
}

// readFrameView reads one frame without copying its payload: payload is a
// view of r's buffer, valid until the caller discards used bytes of r
// (r.Discard(used)), which it must do before reading on. A payload larger
// than r's buffer is read into *big instead (used is then 0).
func readFrameView(r *bufio.Reader, big *[]byte) (kind uint8, id uint64, payload []byte, used int, err error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, 0, err
	}
	n := binary.LittleEndian.Uint32(h[:4])
	if n < 9 || n > MaxFrame {
		return 0, 0, nil, 0, fmt.Errorf("%w: length %d", ErrFrame, n)
	}
	size := int(n - 9)
	kind, id = h[4], binary.LittleEndian.Uint64(h[5:13])
	if size <= r.Size() {
		payload, err = r.Peek(size)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, nil, 0, err
		}
		return kind, id, payload, size, nil
	}
	if cap(*big) < size {
		*big = make([]byte, size)
	}
	payload = (*big)[:size]
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, 0, err
	}
	return kind, id, payload, 0, nil
}

// frameReader reads frames from a connection into its own buffer. A read
// cut short (a deadline) keeps what it got, so the next call of next
// resumes the frame: the client's read side passes between goroutines.
type frameReader struct {
	b    []byte
	r, w int // unread bytes are b[r:w]
}

// buffered is the number of bytes read and not yet returned.
func (f *frameReader) buffered() int { return f.w - f.r }

// next returns the next frame; its payload is a new slice the caller owns.
func (f *frameReader) next(src io.Reader) (kind uint8, id uint64, payload []byte, err error) {
	for {
		need := headerLen
		if f.w-f.r >= 4 {
			n := binary.LittleEndian.Uint32(f.b[f.r:])
			if n < 9 || n > MaxFrame {
				return 0, 0, nil, fmt.Errorf("%w: length %d", ErrFrame, n)
			}
			need = 4 + int(n)
			if f.w-f.r >= need {
				h := f.b[f.r:]
				payload = append([]byte(nil), h[headerLen:need]...)
				kind, id = h[4], binary.LittleEndian.Uint64(h[5:headerLen])
				f.r += need
				if f.r == f.w {
					f.r, f.w = 0, 0
					if len(f.b) > 1<<20 { // do not keep a large frame's buffer
						f.b = nil
					}
				}
				return kind, id, payload, nil
			}
		}
		if len(f.b)-f.r < need { // make room for the whole frame
			if f.r > 0 && len(f.b) >= need {
				f.w = copy(f.b, f.b[f.r:f.w])
				f.r = 0
			} else {
				nb := make([]byte, max(need, 64<<10, 2*len(f.b)))
				f.w = copy(nb, f.b[f.r:f.w])
				f.r, f.b = 0, nb
			}
		}
		m, err := src.Read(f.b[f.w:])
		f.w += m
		if err != nil {
			if errors.Is(err, io.EOF) && f.w > f.r {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, nil, err
		}
	}
}
