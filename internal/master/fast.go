package master

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
		if err := proto.Unmarshal(payload, req); err != nil {
			return []byte(err.Error()), fastrpc.StatusBadRequest
		}
		resp, err := f(context.Background(), req)
		if err != nil {
			return []byte(err.Error()), fastrpc.StatusBadRequest
		}
		out, err := proto.Marshal(resp)
		if err != nil {
			return []byte(err.Error()), fastrpc.StatusBadRequest
		}
		return out, fastrpc.StatusOK
	}
}
