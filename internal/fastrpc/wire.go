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
)

// ErrFrame is a malformed frame: too long or too short.
var ErrFrame = errors.New("fastrpc: bad frame")

// appendFrame appends one frame to b.
func appendFrame(b []byte, kind uint8, id uint64, payload []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(1+8+len(payload)))
	b = append(b, kind)
	b = binary.LittleEndian.AppendUint64(b, id)
	return append(b, payload...)
}

// readFrame reads one frame. The payload is a new slice the caller owns.
func readFrame(r *bufio.Reader) (kind uint8, id uint64, payload []byte, err error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[:4])
	if n < 9 || n > MaxFrame {
		return 0, 0, nil, fmt.Errorf("%w: length %d", ErrFrame, n)
	}
	payload = make([]byte, n-9)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, err
	}
	return h[4], binary.LittleEndian.Uint64(h[5:13]), payload, nil
}
