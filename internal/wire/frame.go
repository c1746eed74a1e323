package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Frame types on the RPC port.
const (
	FrameConnection byte = 0
	FrameMetadata   byte = 1
	FrameNotify     byte = 2
	FrameProbe      byte = 3
	FrameLane       byte = 4
)

// MaxControlFrame is the default bound on a control frame (type byte + body).
const MaxControlFrame = 1 << 20

// Errors returned by the decoders.
var (
	ErrFrameTooLarge = errors.New("frame too large")
	ErrBadFrame      = errors.New("malformed frame")
)

// WriteFrame writes one control frame.
func WriteFrame(w io.Writer, typ byte, body []byte) error {
	buf := make([]byte, 9+len(body))
	binary.LittleEndian.PutUint64(buf, uint64(len(body))+1)
	buf[8] = typ
	copy(buf[9:], body)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one control frame of at most max bytes (type + body).
func ReadFrame(r io.Reader, max int) (typ byte, body []byte, err error) {
	var hdr [9]byte
	if _, err := io.ReadFull(r, hdr[:8]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint64(hdr[:8])
	if n == 0 {
		return 0, nil, fmt.Errorf("%w: zero length", ErrBadFrame)
	}
	if n > uint64(max) {
		return 0, nil, fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, n, max)
	}
	if _, err := io.ReadFull(r, hdr[8:9]); err != nil {
		return 0, nil, err
	}
	typ = hdr[8]
	if typ > FrameLane {
		return 0, nil, fmt.Errorf("%w: unknown type %d", ErrBadFrame, typ)
	}
	body = make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return typ, body, nil
}

// Auth proves knowledge of the shared secret: MAC = HMAC-SHA256(secret, nonce).
type Auth struct {
	Nonce []byte `json:"nonce"`
	MAC   []byte `json:"mac"`
}

// Notify is a small message for the peer's application.
type Notify struct {
	From string `json:"from"`
	Name string `json:"name"`
	Msg  []byte `json:"msg"`
}

// Lane asks to turn the connection into a data lane.
type Lane struct {
	Index    int  `json:"index"`
	Checksum bool `json:"checksum"`
	// From is the dialing engine's segment name, so the target can fence
	// the lanes of one peer (transfer.Engine.FenceFrom). Empty from peers
	// that do not send it.
	From string `json:"from,omitempty"`
}

// Control is the JSON body of every control request and reply.
type Control struct {
	Auth    *Auth    `json:"auth,omitempty"`
	Segment *Segment `json:"segment,omitempty"`
	Notify  *Notify  `json:"notify,omitempty"`
	Lane    *Lane    `json:"lane,omitempty"`
	// Replies.
	OK       bool   `json:"ok,omitempty"`
	Error    string `json:"error,omitempty"`
	Code     string `json:"code,omitempty"` // "auth", "bad_request", ...
	MaxSlice uint64 `json:"max_slice,omitempty"`
	// Vectored, in a lane reply: the lane serves OpReadV and OpWriteV.
	Vectored bool `json:"vectored,omitempty"`
}

// DecodeControl parses a control body and validates what it carries.
func DecodeControl(body []byte) (Control, error) {
	var c Control
	if err := json.Unmarshal(body, &c); err != nil {
		return Control{}, fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	if c.Segment != nil {
		if err := c.Segment.Validate(); err != nil {
			return Control{}, err
		}
	}
	if c.Auth != nil && (len(c.Auth.Nonce) > 64 || len(c.Auth.MAC) > 64) {
		return Control{}, fmt.Errorf("%w: auth fields too long", ErrBadFrame)
	}
	if c.Notify != nil && len(c.Notify.Name) > 4096 {
		return Control{}, fmt.Errorf("%w: notify name too long", ErrBadFrame)
	}
	if c.Lane != nil && (c.Lane.Index < 0 || c.Lane.Index > 1024) {
		return Control{}, fmt.Errorf("%w: lane index %d", ErrBadFrame, c.Lane.Index)
	}
	return c, nil
}

// Data lane header sizes and codes.
const (
	ReqHeaderSize  = 32
	RespHeaderSize = 24

	OpRead  byte = 0
	OpWrite byte = 1
	// OpGrant installs a grant (package internal/grant) on the lane: its
	// payload (Length bytes, at most MaxGrant) is the encoded grant, its
	// first Addr bytes when Addr is not 0: then up to GrantAlign-1 bytes of
	// padding follow it, which keep the payload of the request behind it
	// aligned in the peer's buffer (a 4 KiB copy from an odd address costs
	// a few times one from an aligned one). The server sends no response; a
	// grant that does not verify is dropped, and the READs and WRITEs it was
	// meant to cover are answered StatusDenied.
	OpGrant byte = 2
	// OpReadV and OpWriteV are scatter-gather requests: Addr holds the
	// number of extents (1..MaxExtents) and Length the total payload; the
	// header is followed by the extent table (ExtentSize bytes per extent:
	// addr u64 | length u64) and, for OpWriteV, the payload: the extents'
	// bytes one after the other. The response is one header for the whole
	// request (an OK OpReadV response carries Length payload bytes, the
	// extents in order). A peer offers them in its lane handshake reply
	// (Control.Vectored); single-extent OpRead and OpWrite stay as they are.
	OpReadV  byte = 3
	OpWriteV byte = 4

	FlagCRC byte = 1

	StatusOK         byte = 0
	StatusRejected   byte = 1 // bounds check failed or not registered
	StatusChecksum   byte = 2 // payload CRC mismatch
	StatusBadRequest byte = 3
	StatusDenied     byte = 4 // no valid grant covers the range

	// MaxGrant bounds an OpGrant payload.
	MaxGrant = 20 << 10
	// GrantAlign: an OpGrant payload padded to a multiple of it (with the
	// header's size, also one) keeps what follows aligned as it was.
	GrantAlign = 32
)

// GrantLen is the length of an OpGrant's grant: Addr, or Length when Addr
// is 0 (no padding).
func (h *ReqHeader) GrantLen() uint64 {
	if h.Addr == 0 {
		return h.Length
	}
	return h.Addr
}

// GrantPad is the padding that makes a grant of n bytes a multiple of
// GrantAlign.
func GrantPad(n int) int { return -n & (GrantAlign - 1) }

// Both data headers start alike: the opcode or status, the flags, two
// reserved zero bytes, the payload CRC and the request ID (16 bytes).

func putPrefix(b []byte, code, flags byte, crc uint32, id uint64) {
	b[0], b[1], b[2], b[3] = code, flags, 0, 0
	binary.LittleEndian.PutUint32(b[4:], crc)
	binary.LittleEndian.PutUint64(b[8:], id)
}

func prefix(b []byte) (code, flags byte, crc uint32, id uint64) {
	return b[0], b[1], binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint64(b[8:])
}

// checkReserved rejects unknown flags and non-zero reserved bytes.
func checkReserved(b []byte) error {
	if b[1]&^FlagCRC != 0 || b[2] != 0 || b[3] != 0 {
		return fmt.Errorf("%w: reserved bits set", ErrBadFrame)
	}
	return nil
}

// ReqHeader is a data request.
type ReqHeader struct {
	Op     byte
	Flags  byte
	CRC    uint32
	ID     uint64
	Addr   uint64
	Length uint64
}

// Put encodes h into b[:ReqHeaderSize].
func (h *ReqHeader) Put(b []byte) {
	_ = b[ReqHeaderSize-1]
	putPrefix(b, h.Op, h.Flags, h.CRC, h.ID)
	binary.LittleEndian.PutUint64(b[16:], h.Addr)
	binary.LittleEndian.PutUint64(b[24:], h.Length)
}

// DecodeReqHeader parses and validates a request header; maxLen bounds Length.
func DecodeReqHeader(b []byte, maxLen uint64) (ReqHeader, error) {
	if len(b) < ReqHeaderSize {
		return ReqHeader{}, fmt.Errorf("%w: short request header", ErrBadFrame)
	}
	var h ReqHeader
	h.Op, h.Flags, h.CRC, h.ID = prefix(b)
	h.Addr, h.Length = binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
	if h.Op > OpWriteV {
		return ReqHeader{}, fmt.Errorf("%w: opcode %d", ErrBadFrame, h.Op)
	}
	if h.Vectored() && (h.Addr == 0 || h.Addr > MaxExtents) {
		return ReqHeader{}, fmt.Errorf("%w: %d extents (1..%d)", ErrBadFrame, h.Addr, MaxExtents)
	}
	if h.Vectored() && h.Length < h.Addr {
		return ReqHeader{}, fmt.Errorf("%w: %d bytes in %d extents", ErrBadFrame, h.Length, h.Addr)
	}
	if h.Op == OpGrant && h.Length > MaxGrant {
		return ReqHeader{}, fmt.Errorf("%w: grant of %d bytes", ErrFrameTooLarge, h.Length)
	}
	if h.Op == OpGrant && h.Addr != 0 && (h.Addr > h.Length || h.Length-h.Addr >= GrantAlign) {
		return ReqHeader{}, fmt.Errorf("%w: grant of %d bytes in %d", ErrBadFrame, h.Addr, h.Length)
	}
	if err := checkReserved(b); err != nil {
		return ReqHeader{}, err
	}
	if h.Length > maxLen {
		return ReqHeader{}, fmt.Errorf("%w: slice %d > %d", ErrFrameTooLarge, h.Length, maxLen)
	}
	return h, nil
}

// RespHeader is a data response.
type RespHeader struct {
	Status byte
	Flags  byte
	CRC    uint32
	ID     uint64
	Length uint64
}

// Put encodes h into b[:RespHeaderSize].
func (h *RespHeader) Put(b []byte) {
	_ = b[RespHeaderSize-1]
	putPrefix(b, h.Status, h.Flags, h.CRC, h.ID)
	binary.LittleEndian.PutUint64(b[16:], h.Length)
}

// DecodeRespHeader parses and validates a response header.
func DecodeRespHeader(b []byte, maxLen uint64) (RespHeader, error) {
	if len(b) < RespHeaderSize {
		return RespHeader{}, fmt.Errorf("%w: short response header", ErrBadFrame)
	}
	var h RespHeader
	h.Status, h.Flags, h.CRC, h.ID = prefix(b)
	h.Length = binary.LittleEndian.Uint64(b[16:])
	if h.Status > StatusDenied {
		return RespHeader{}, fmt.Errorf("%w: status %d", ErrBadFrame, h.Status)
	}
	if err := checkReserved(b); err != nil {
		return RespHeader{}, err
	}
	if h.Length > maxLen {
		return RespHeader{}, fmt.Errorf("%w: length %d > %d", ErrFrameTooLarge, h.Length, maxLen)
	}
	return h, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the Castagnoli CRC of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// MaxExtents bounds the extents of one scatter-gather request; its extent
// table is at most MaxExtents*ExtentSize (64 KiB).
const MaxExtents = 4096

// ExtentSize is the size of one entry of a scatter-gather extent table.
const ExtentSize = 16

// Extent is one contiguous range of a scatter-gather request.
type Extent struct {
	Addr   uint64
	Length uint64
}

// Vectored reports whether h is a scatter-gather request (OpReadV,
// OpWriteV), whose Addr is its extent count.
func (h *ReqHeader) Vectored() bool { return h.Op == OpReadV || h.Op == OpWriteV }

// IsWrite reports whether h carries a payload to write (OpWrite, OpWriteV).
func (h *ReqHeader) IsWrite() bool { return h.Op == OpWrite || h.Op == OpWriteV }

// PutExtents appends the extent table of ext to b.
func PutExtents(b []byte, ext []Extent) []byte {
	for _, e := range ext {
		b = binary.LittleEndian.AppendUint64(b, e.Addr)
		b = binary.LittleEndian.AppendUint64(b, e.Length)
	}
	return b
}

// DecodeExtents parses the extent table of a scatter-gather request whose
// header said count extents of total bytes, into ext[:0] (reused when it
// is large enough). Every extent must be non-empty and not wrap around the
// address space, and the lengths must add up to total exactly; whether
// each extent lies in registered memory is the server's check.
func DecodeExtents(b []byte, count, total uint64, ext []Extent) ([]Extent, error) {
	if count == 0 || count > MaxExtents {
		return nil, fmt.Errorf("%w: %d extents (1..%d)", ErrBadFrame, count, MaxExtents)
	}
	if uint64(len(b)) != count*ExtentSize {
		return nil, fmt.Errorf("%w: extent table of %d bytes for %d extents", ErrBadFrame, len(b), count)
	}
	ext = ext[:0]
	var sum uint64
	for i := uint64(0); i < count; i++ {
		e := Extent{Addr: binary.LittleEndian.Uint64(b[i*ExtentSize:]), Length: binary.LittleEndian.Uint64(b[i*ExtentSize+8:])}
		if e.Length == 0 || e.Addr+e.Length < e.Addr {
			return nil, fmt.Errorf("%w: extent %d %#x+%d", ErrBadFrame, i, e.Addr, e.Length)
		}
		if sum+e.Length < sum || sum+e.Length > total {
			return nil, fmt.Errorf("%w: extents exceed the request's %d bytes", ErrBadFrame, total)
		}
		sum += e.Length
		ext = append(ext, e)
	}
	if sum != total {
		return nil, fmt.Errorf("%w: extents hold %d bytes, the request %d", ErrBadFrame, sum, total)
	}
	return ext, nil
}
