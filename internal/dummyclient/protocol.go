package dummyclient

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/kvcache-go/mooncake/internal/storeerr"
	"github.com/kvcache-go/mooncake/store"
)

// SocketName is the abstract unix socket a real client serving addr
// ("host:port", as given to setup_dummy) listens on.
func SocketName(addr string) string { return "@mooncake-client/" + addr }

// maxHeader bounds a frame's JSON header; maxData bounds its inline data.
const (
	maxHeader = 16 << 20
	maxData   = 1 << 40
)

// request is a frame header from a dummy client.
type request struct {
	Op      string           `json:"op"`
	Key     string           `json:"key,omitempty"`
	Keys    []string         `json:"keys,omitempty"`
	Pool    uint64           `json:"pool,omitempty"`    // attach: pool size
	InPool  bool             `json:"in_pool,omitempty"` // the data is pool[Off:Off+Len], not inline
	Off     uint64           `json:"off,omitempty"`
	Len     uint64           `json:"len,omitempty"`
	Opts    store.PutOptions `json:"opts"`
	Force   bool             `json:"force,omitempty"`
	Pattern string           `json:"pattern,omitempty"`
	Prefix  string           `json:"prefix,omitempty"`
	After   string           `json:"after,omitempty"`
	Limit   int              `json:"limit,omitempty"`
	// copy/move tasks (tasks.go)
	Targets []string      `json:"targets,omitempty"`
	Source  string        `json:"source,omitempty"`
	Target  string        `json:"target,omitempty"`
	Task    *store.TaskID `json:"task,omitempty"`
}

// wireError is an error as it crosses the socket.
type wireError struct {
	Msg  string `json:"msg"`
	Code int32  `json:"code"`
	Kind string `json:"kind,omitempty"` // a store sentinel without a Mooncake code
}

// reply is a frame header from the real client.
type reply struct {
	Err     *wireError        `json:"err,omitempty"`
	N       int64             `json:"n,omitempty"`
	Bools   []bool            `json:"bools,omitempty"`
	Info    *store.ObjectInfo `json:"info,omitempty"`
	List    []store.KeyInfo   `json:"list,omitempty"`
	Next    string            `json:"next,omitempty"`
	Errs    []*wireError      `json:"errs,omitempty"`
	Segment string            `json:"segment,omitempty"`
	TaskID  *store.TaskID     `json:"task_id,omitempty"`
	Task    *store.Task       `json:"task,omitempty"`
}

// kinds are the store sentinels that have no Mooncake code of their own.
var kinds = map[string]error{
	"corrupt":          store.ErrCorrupt,
	"no_replica":       store.ErrNoReplica,
	"transfer":         store.ErrTransfer,
	"buffer_too_small": store.ErrBufferTooSmall,
	"closed":           store.ErrClosed,
	"peer_not_allowed": ErrPeerNotAllowed,
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Msg: err.Error(), Code: storeerr.Code(err)}
	for k, e := range kinds {
		if errors.Is(err, e) {
			w.Kind = k
		}
	}
	return w
}

// remoteError is an error from the real client; it matches the sentinel it
// matched there.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return "dummy client: real client: " + e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

func fromWire(w *wireError) error {
	if w == nil {
		return nil
	}
	if e, ok := kinds[w.Kind]; ok {
		return &remoteError{msg: w.Msg, sentinel: e}
	}
	if w.Code != 0 && w.Code != storeerr.CodeInternal {
		return &remoteError{msg: w.Msg, sentinel: storeerr.ErrorOf(w.Code)}
	}
	return &remoteError{msg: w.Msg}
}

func writeFrame(w io.Writer, hdr any, data []byte) error {
	h, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	var pre [12]byte
	binary.LittleEndian.PutUint32(pre[:4], uint32(len(h)))
	binary.LittleEndian.PutUint64(pre[4:], uint64(len(data)))
	buf := make([]byte, 0, len(pre)+len(h)+min(len(data), 64<<10))
	buf = append(append(buf, pre[:]...), h...)
	if len(data) <= 64<<10 {
		_, err = w.Write(append(buf, data...))
		return err
	}
	if _, err = w.Write(buf); err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// readFrame reads a frame into hdr; the data goes into dst when it fits
// (returned as a prefix of dst), else into a new slice.
func readFrame(r io.Reader, hdr any, dst []byte) ([]byte, error) {
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, err
	}
	hl, dl := binary.LittleEndian.Uint32(pre[:4]), binary.LittleEndian.Uint64(pre[4:])
	if hl > maxHeader || dl > maxData {
		return nil, fmt.Errorf("dummy client: frame of %d+%d bytes", hl, dl)
	}
	h := make([]byte, hl)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(h, hdr); err != nil {
		return nil, fmt.Errorf("dummy client: bad frame header: %w", err)
	}
	var data []byte
	if uint64(len(dst)) >= dl {
		data = dst[:dl]
	} else {
		data = make([]byte, dl)
	}
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, err
	}
	return data, nil
}
