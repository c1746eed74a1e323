package masterserver

import (
	"context"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"google.golang.org/protobuf/proto"
)

// FastHandler serves the hot calls (puts, replica lists, existence) on the
// fastrpc transport, with the same messages and the same code as their
// gRPC methods.
func (s *Service) FastHandler() fastrpc.Handler {
	table := map[uint8]func([]byte) ([]byte, uint8){
		pb.FastPutStart:            fastUnary(s.PutStart),
		pb.FastPutEnd:              fastUnary(s.PutEnd),
		pb.FastPutRevoke:           fastUnary(s.PutRevoke),
		pb.FastGetReplicaList:      fastUnary(s.GetReplicaList),
		pb.FastExist:               fastUnary(s.Exist),
		pb.FastBatchExist:          fastUnary(s.BatchExist),
		pb.FastBatchGetReplicaList: fastUnary(s.BatchGetReplicaList),
		pb.FastBatchPutStart:       fastUnary(s.BatchPutStart),
		pb.FastBatchPutEnd:         fastUnary(s.BatchPutEnd),
		pb.FastBatchExistBits:      s.batchExistBits,
		pb.FastPutCommit:           s.putCommit,
	}
	return func(method uint8, payload []byte) ([]byte, uint8) {
		f := table[method]
		if f == nil {
			return []byte("unknown method"), fastrpc.StatusUnknownMethod
		}
		return f(payload)
	}
}

// fastUnary adapts one gRPC method of Service to fastrpc.
func fastUnary[Req any, PReq interface {
	*Req
	proto.Message
}, Resp proto.Message](f func(context.Context, PReq) (Resp, error)) func([]byte) ([]byte, uint8) {
	return func(payload []byte) ([]byte, uint8) {
		req := PReq(new(Req))
		if err := pb.UnmarshalRequest(payload, req); err != nil {
			return []byte(err.Error()), fastrpc.StatusBadRequest
		}
		resp, err := f(context.Background(), req)
		if err != nil {
			return []byte(err.Error()), fastrpc.StatusBadRequest
		}
		out, err := pb.Marshal(resp)
		if err != nil {
			return []byte(err.Error()), fastrpc.StatusBadRequest
		}
		return out, fastrpc.StatusOK
	}
}

// putCommit answers FastPutCommit: the end of a put (the key's own put in
// progress, or a slot written before), then, when asked and the put went
// through, a slot for the client's next put.
func (s *Service) putCommit(payload []byte) ([]byte, uint8) {
	var r pb.PutCommitRequest
	if err := pb.UnmarshalRequest(payload, &r); err != nil {
		return []byte(err.Error()), fastrpc.StatusBadRequest
	}
	out := &pb.PutCommitResponse{}
	rc := rcFromPB(r.Config)
	if r.Slot == "" {
		out.Status = status(s.m.PutEnd(r.ClientId, r.Key, r.Crc32C))
	} else {
		tombs, gone, err := s.m.PutCommit(r.ClientId, r.Key, r.Slot, r.Crc32C, rc, r.Upsert)
		out.Status, out.SlotGone, out.Tombstones = status(err), gone, refsToPB(tombs)
	}
	if out.Status.Code == 0 && !out.SlotGone && r.ReserveSize > 0 && r.ReserveKeyLen <= uint64(s.m.Config().MaxKeyLen) {
		if slot, reps, err := s.m.PutReserve(r.ClientId, r.ReserveSize, int(r.ReserveKeyLen), rc); err == nil && len(reps) > 0 {
			out.NextSlot = slot
			out.Next = &pb.PutStartResponse{Status: status(nil), Replicas: replicasToPB(reps), Seq: reps[0].Seq, HeaderLen: reps[0].HeaderLen}
		}
	}
	b, err := pb.Marshal(out)
	if err != nil {
		return []byte(err.Error()), fastrpc.StatusBadRequest
	}
	return b, fastrpc.StatusOK
}
