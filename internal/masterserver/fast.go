package masterserver

import (
	"context"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"google.golang.org/protobuf/proto"
)

// FastHandler serves the hot calls (puts, replica lists, existence) on the
// fastrpc transport, with the same messages and the same code as their
// gRPC methods. ctx is the server's: the handlers run under it.
//
// The handler serves the tenant ctx carries (withCaller; tenant.Default
// when none): with tenants, one handler per authenticated connection.
func (s *Service) FastHandler(ctx context.Context) fastrpc.Handler {
	ns := callerOf(ctx).Namespace
	table := map[uint8]func([]byte) ([]byte, uint8){
		pb.FastPutStart:            fastUnary(ctx, s.PutStart),
		pb.FastPutCommit:           fastUnary(ctx, s.PutCommit),
		pb.FastPutRevoke:           fastUnary(ctx, s.PutRevoke),
		pb.FastGetReplicaList:      fastUnary(ctx, s.GetReplicaList),
		pb.FastExist:               fastUnary(ctx, s.Exist),
		pb.FastBatchExist:          fastUnary(ctx, s.BatchExist),
		pb.FastBatchGetReplicaList: fastUnary(ctx, s.BatchGetReplicaList),
		pb.FastBatchPutStart:       fastUnary(ctx, s.BatchPutStart),
		pb.FastBatchPutCommit:      fastUnary(ctx, s.BatchPutCommit),
		pb.FastBatchExistBits:      func(p []byte) ([]byte, uint8) { return s.batchExistBits(ns, p) },
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
}, Resp proto.Message](ctx context.Context, f func(context.Context, PReq) (Resp, error)) func([]byte) ([]byte, uint8) {
	return func(payload []byte) ([]byte, uint8) {
		req := PReq(new(Req))
		if err := pb.UnmarshalRequest(payload, req); err != nil {
			return []byte(err.Error()), fastrpc.StatusBadRequest
		}
		resp, err := f(ctx, req)
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
