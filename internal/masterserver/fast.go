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
	// The calls of every put and get take the caller's namespace bound
	// here, once per handler (per connection with tenants).
	table := map[uint8]func([]byte) ([]byte, uint8){
		pb.FastPutStart:            fastBound(func(r *pb.PutStartRequest) *pb.PutStartResponse { return s.putStart(ns, r) }),
		pb.FastPutCommit:           fastBound(func(r *pb.PutCommitRequest) *pb.PutCommitResponse { return s.putCommit(ns, r) }),
		pb.FastPutRevoke:           fastUnary(ctx, s.PutRevoke),
		pb.FastGetReplicaList:      fastBound(func(r *pb.KeyRequest) *pb.ObjectInfo { return s.getReplicaList(ns, r) }),
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
		return fastAnswer(resp)
	}
}

// fastBound is fastUnary for a call whose caller is bound in f.
func fastBound[Req any, PReq interface {
	*Req
	proto.Message
}, Resp proto.Message](f func(PReq) Resp) func([]byte) ([]byte, uint8) {
	return func(payload []byte) ([]byte, uint8) {
		req := PReq(new(Req))
		if err := pb.UnmarshalRequest(payload, req); err != nil {
			return []byte(err.Error()), fastrpc.StatusBadRequest
		}
		return fastAnswer(f(req))
	}
}

func fastAnswer(resp proto.Message) ([]byte, uint8) {
	out, err := pb.Marshal(resp)
	if err != nil {
		return []byte(err.Error()), fastrpc.StatusBadRequest
	}
	return out, fastrpc.StatusOK
}
