package storepb

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
