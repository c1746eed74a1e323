package storepb

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
)

// Method numbers of the master's hot calls on the fastrpc transport
// (internal/fastrpc): the payloads are the same messages as the gRPC
// methods of the same names, except FastBatchExistBits, whose request is a
// BatchKeysRequest and whose answer is one byte per key (1 = exists).
const (
	FastPutStart uint8 = 1 + iota
	FastPutCommit
	FastPutRevoke
	FastGetReplicaList
	FastExist
	FastBatchExist
	FastBatchGetReplicaList
	FastBatchPutStart
	FastBatchPutCommit
	FastBatchExistBits

	FastLast = FastBatchExistBits // the highest method number
)

// Marshal encodes m with its generated fast codec (vtprotobuf's MarshalVT,
// *_vtproto.pb.go: no reflection, one allocation) when it has one, with
// proto.Marshal otherwise. The bytes are the same protobuf encoding. The
// fastrpc calls use it: proto.Marshal and proto.Unmarshal were a fifth of
// a 4 KiB put's CPU on both ends.
func Marshal(m proto.Message) ([]byte, error) {
	if v, ok := m.(interface{ MarshalVT() ([]byte, error) }); ok {
		return v.MarshalVT()
	}
	return proto.Marshal(m)
}

// MarshalAppend is Marshal that appends the encoding to b (no allocation
// when b has room), for callers that reuse their buffers.
func MarshalAppend(b []byte, m proto.Message) ([]byte, error) {
	v, ok := m.(interface {
		SizeVT() int
		MarshalToSizedBufferVT([]byte) (int, error)
	})
	if !ok {
		return proto.MarshalOptions{}.MarshalAppend(b, m)
	}
	n := v.SizeVT()
	b = slices.Grow(b, n)
	if _, err := v.MarshalToSizedBufferVT(b[len(b) : len(b)+n]); err != nil {
		return nil, err
	}
	return b[:len(b)+n], nil
}

// Unmarshal decodes b into m, a new (empty) message, with its generated
// fast codec (UnmarshalVT) when it has one, with proto.Unmarshal otherwise.
func Unmarshal(b []byte, m proto.Message) error {
	if v, ok := m.(interface{ UnmarshalVT([]byte) error }); ok {
		return v.UnmarshalVT(b)
	}
	return proto.Unmarshal(b, m)
}

// UnmarshalAliasing is Unmarshal for b that its caller owns and nothing
// writes again: the message's strings and bytes point into b instead of
// being copied (vtprotobuf's UnmarshalVTUnsafe), and b stays alive while
// any of them is referenced, so it suits small answers only (a string
// kept from a large one would keep all of it). The message's byte slices
// must not be appended to (their capacity runs on into b).
func UnmarshalAliasing(b []byte, m proto.Message) error {
	if v, ok := m.(interface{ UnmarshalVTUnsafe([]byte) error }); ok {
		return v.UnmarshalVTUnsafe(b)
	}
	return Unmarshal(b, m)
}

// UnmarshalRequest is Unmarshal for what a server reads off the network:
// it also refuses strings that are not valid UTF-8 anywhere in the
// message, as proto.Unmarshal does for proto3 strings (vtprotobuf's
// decoder does not check): a key the gRPC path refuses must not get in
// through fastrpc, where it would break every later gRPC answer that
// carries it (List, for one). It takes the fastrpc requests only (those
// requestUTF8 knows); any other message is refused, so a method added
// without its check fails its first test.
func UnmarshalRequest(b []byte, m proto.Message) error {
	if err := Unmarshal(b, m); err != nil {
		return err
	}
	ok, known := requestUTF8(m)
	switch {
	case !known:
		return fmt.Errorf("storepb: no UTF-8 check for %T (add it to requestUTF8)", m)
	case !ok:
		return errUTF8
	}
	return nil
}

var errUTF8 = errors.New("storepb: a string is not valid UTF-8")

// requestUTF8 checks the strings of the fastrpc requests (by hand: a
// reflective walk cost ~0.6 us per put, more than decoding it); known is
// false for other messages. TestRequestUTF8CoversEveryString keeps it in
// step with the messages' string fields.
func requestUTF8(m proto.Message) (ok, known bool) {
	v := utf8.ValidString
	switch r := m.(type) {
	case *KeyRequest:
		return v(r.Key), true
	case *BatchKeysRequest:
		for _, k := range r.Keys {
			if !v(k) {
				return false, true
			}
		}
		return true, true
	case *PutCommitRequest:
		return putCommitUTF8(r), true
	case *PutStartRequest:
		return putStartUTF8(r), true
	case *PutRevokeRequest:
		return v(r.ClientId) && v(r.Key), true
	case *BatchPutStartRequest:
		for _, p := range r.Puts {
			if !putStartUTF8(p) {
				return false, true
			}
		}
		return true, true
	case *BatchPutCommitRequest:
		for _, e := range r.Commits {
			if !putCommitUTF8(e) {
				return false, true
			}
		}
		return true, true
	case *RemountSegmentsRequest: // GRPCCodec's
		return remountUTF8(r), true
	}
	return false, false
}

func putStartUTF8(r *PutStartRequest) bool {
	return utf8.ValidString(r.GetClientId()) && utf8.ValidString(r.GetKey()) && configUTF8(r.GetConfig())
}

func putCommitUTF8(r *PutCommitRequest) bool {
	return utf8.ValidString(r.GetClientId()) && utf8.ValidString(r.GetKey()) && utf8.ValidString(r.GetSlot()) && configUTF8(r.GetConfig())
}

func configUTF8(c *ReplicateConfig) bool {
	for _, s := range c.GetPreferredSegments() {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func remountUTF8(r *RemountSegmentsRequest) bool {
	v := utf8.ValidString
	if !v(r.ClientId) {
		return false
	}
	for _, s := range r.Segments {
		if !v(s.GetName()) || !v(s.GetEndpoint()) || !v(s.GetDiskUrl()) {
			return false
		}
	}
	seg := "" // the reports of a chunk name one segment, mostly: checked once
	for _, h := range r.Objects {
		if !v(h.GetKey()) || (h.GetSegment() != seg && !v(h.GetSegment())) {
			return false
		}
		seg = h.GetSegment()
	}
	return true
}
