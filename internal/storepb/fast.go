package storepb

import "google.golang.org/protobuf/proto"

// Method numbers of the master's hot calls on the fastrpc transport
// (internal/fastrpc): the payloads are the same messages as the gRPC
// methods of the same names, except FastBatchExistBits, whose request is a
// BatchKeysRequest and whose answer is one byte per key (1 = exists).
const (
	FastPutStart uint8 = 1 + iota
	FastPutEnd
	FastPutRevoke
	FastGetReplicaList
	FastExist
	FastBatchExist
	FastBatchGetReplicaList
	FastBatchPutStart
	FastBatchPutEnd
	FastBatchExistBits
	FastPutCommit // PutCommitRequest -> PutCommitResponse (store_fast.proto)
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

// Unmarshal decodes b into m, a new (empty) message, with its generated
// fast codec (UnmarshalVT) when it has one, with proto.Unmarshal otherwise.
func Unmarshal(b []byte, m proto.Message) error {
	if v, ok := m.(interface{ UnmarshalVT([]byte) error }); ok {
		return v.UnmarshalVT(b)
	}
	return proto.Unmarshal(b, m)
}
