package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	"github.com/kvcache-go/mooncake/internal/leader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// fastMaster is the client's master RPC: the hot calls (puts, replica
// lists, existence) go over one fastrpc connection to the master's port
// when the master speaks it, everything else and every call the fast path
// could not send goes over gRPC. A call whose connection was lost after it
// was sent (the master restarted) is retried over gRPC, as the gRPC
// retry policy (serviceConfig) retries UNAVAILABLE: a put call the old
// master did handle then fails with OBJECT_ALREADY_EXISTS, never twice
// applied.
//
// It is also the put pipeline's putRPC (put.go): the choice of transport is
// made once, when the client is made (newFastMaster), and the rule of
// falling back to gRPC is fastCall's.
type fastMaster struct {
	pb.MasterServiceClient
	addr    string              // "" = gRPC only (HA addresses, Config.NoFastRPC)
	pool    *ConnPool           // where the fastrpc connection comes from
	lane    int                 // which of the pool's connections to addr it shares
	dial    fastrpc.DialOptions // credential and TLS of its connections
	timeout time.Duration       // bound of each hot call (Config.RPCTimeout)

	mu      sync.Mutex
	conn    *fastrpc.Client
	backoff time.Duration
	retryAt time.Time // no dial before this after a failed one
	closed  bool
}

// fastDialTimeout bounds one dial of the fast path (the call then goes
// over gRPC, which waits for the master as before).
const fastDialTimeout = time.Second

var _ putRPC = (*fastMaster)(nil)

// newFastMaster chooses the transport of the hot calls: fastrpc (with the
// gRPC fallback) when Master is a plain host:port and NoFastRPC is not
// set, gRPC only otherwise.
func newFastMaster(rpc pb.MasterServiceClient, cfg Config) *fastMaster {
	m := &fastMaster{MasterServiceClient: rpc, timeout: cfg.RPCTimeout}
	if _, _, err := net.SplitHostPort(cfg.Master); err == nil && !leader.IsHA(cfg.Master) && !cfg.NoFastRPC {
		m.addr, m.pool = cfg.Master, cfg.ConnPool
		m.lane = m.pool.lane()
		m.dial.TLS = cfg.TLS
		if cred, claim := cfg.credential(), cfg.tenantClaim(); cred != "" || claim != "" {
			m.dial.Credential = tenant.EncodeCredential(cred, claim)
		}
	}
	return m
}

// client returns the fastrpc connection, taking one from the client's
// pool (dialling it when there is none) when this client has none and the
// last failed dial is old enough; nil means use gRPC.
func (m *fastMaster) client(ctx context.Context) *fastrpc.Client {
	if m.addr == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil && m.conn.Err() == nil {
		return m.conn
	}
	if m.conn != nil {
		m.pool.release(m.addr, m.lane, m.dial, m.conn)
		m.conn = nil
	}
	if m.closed || time.Now().Before(m.retryAt) {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, fastDialTimeout)
	defer cancel()
	c, err := m.pool.get(dctx, m.addr, m.lane, m.dial)
	if err != nil {
		m.backoff = min(max(2*m.backoff, 100*time.Millisecond), time.Minute)
		m.retryAt = time.Now().Add(m.backoff)
		return nil
	}
	m.conn, m.backoff = c, 0
	return c
}

func (m *fastMaster) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.conn != nil {
		m.pool.release(m.addr, m.lane, m.dial, m.conn)
		m.conn = nil
	}
}

// deadline is when a hot call started now gives up (by the wall clock: it
// becomes a socket deadline): RPCTimeout from now,
// or ctx's deadline when sooner. The hot calls (the methods below) bound
// themselves so, and their callers pass ctx as is: on the fast path the
// bound costs no timer (fastrpc.Client.CallBy), only the gRPC fallback
// makes a context with that deadline.
func (m *fastMaster) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(m.timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// slowCall runs a gRPC call under the hot call's deadline.
func slowCall[PR any](ctx context.Context, deadline time.Time, slow func(context.Context) (PR, error)) (PR, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return slow(ctx)
}

// fallBack reports whether a fast call's error sends the call over gRPC:
// the request did not leave, the master refused it, or the connection was
// lost before the answer (a restarted master answers the retry).
func fallBack(err error) bool {
	return errors.Is(err, fastrpc.ErrNotSent) || errors.Is(err, fastrpc.ErrRemote) || errors.Is(err, fastrpc.ErrConnLost)
}

// fastCall sends req as method on the fast path into a new R, or calls
// slow (gRPC) when the fast path is unavailable, did not send it or lost
// its connection before the answer; both within m.deadline(ctx).
func fastCall[R any, PR interface {
	*R
	proto.Message
}](ctx context.Context, m *fastMaster, method uint8, req proto.Message, slow func(context.Context) (PR, error)) (PR, error) {
	resp, _, err := fastCallOn(ctx, m, method, req, slow)
	return resp, err
}

// fastCallOn is fastCall that also returns the fastrpc connection that
// carried the call (nil when gRPC did).
func fastCallOn[R any, PR interface {
	*R
	proto.Message
}](ctx context.Context, m *fastMaster, method uint8, req proto.Message, slow func(context.Context) (PR, error)) (PR, *fastrpc.Client, error) {
	deadline := m.deadline(ctx)
	c := m.client(ctx)
	if c == nil {
		resp, err := slowCall(ctx, deadline, slow)
		return resp, nil, err
	}
	bp := reqBufs.Get().(*[]byte)
	b, err := pb.MarshalAppend((*bp)[:0], req)
	if err != nil {
		reqBufs.Put(bp)
		resp, err := slowCall(ctx, deadline, slow)
		return resp, nil, err
	}
	out, err := c.CallBy(ctx, deadline, method, b) // b is copied into the connection's write queue
	if cap(b) <= maxPooledReq {
		*bp = b[:0]
		reqBufs.Put(bp)
	}
	switch {
	case err == nil:
	case fallBack(err):
		resp, err := slowCall(ctx, deadline, slow)
		return resp, nil, err
	case errors.Is(err, fastrpc.ErrUnauthenticated):
		return nil, c, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	default:
		return nil, c, err
	}
	resp := PR(new(R))
	unmarshal := pb.Unmarshal
	if len(out) <= maxAliasedAnswer {
		// out is this call's own (fastrpc hands each answer out in a new
		// slice): a small answer's strings and grants point into it.
		unmarshal = pb.UnmarshalAliasing
	}
	if err := unmarshal(out, resp); err != nil {
		return nil, c, err
	}
	return resp, c, nil
}

// maxAliasedAnswer is the largest fastrpc answer whose decoded strings
// and bytes point into it (storepb.UnmarshalAliasing): a replica list, a
// placement; a larger one (a listing's page) is copied out, so a key kept
// from it does not keep the whole page.
const maxAliasedAnswer = 4096

// reqBufs recycles the encoded requests of fastCallOn (CallBy copies them
// into its write queue), up to maxPooledReq bytes each.
var reqBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledReq = 64 << 10

// reserve implements putRPC with PutStart.
func (m *fastMaster) reserve(ctx context.Context, in *pb.PutStartRequest) (*pb.PutStartResponse, error) {
	return fastCall(ctx, m, pb.FastPutStart, in, func(ctx context.Context) (*pb.PutStartResponse, error) {
		return m.MasterServiceClient.PutStart(ctx, in)
	})
}

// commit implements putRPC with PutCommit. A slot is asked for only
// on the fast path: over gRPC the reservation is left out of the request,
// and the answer's link is nil.
func (m *fastMaster) commit(ctx context.Context, in *pb.PutCommitRequest) (*pb.PutCommitResponse, putLink, error) {
	resp, c, err := fastCallOn(ctx, m, pb.FastPutCommit, in, func(ctx context.Context) (*pb.PutCommitResponse, error) {
		if in.ReserveSize != 0 {
			in = &pb.PutCommitRequest{ClientId: in.ClientId, Key: in.Key, Slot: in.Slot, Crc32C: in.Crc32C, Config: in.Config, Upsert: in.Upsert}
		}
		return m.MasterServiceClient.PutCommit(ctx, in)
	})
	if c == nil || resp == nil {
		return resp, nil, err
	}
	return resp, fastLink{m, c}, err
}

// revoke implements putRPC with PutRevoke.
func (m *fastMaster) revoke(ctx context.Context, in *pb.PutRevokeRequest) error {
	_, err := fastCall(ctx, m, pb.FastPutRevoke, in, func(ctx context.Context) (*pb.Status, error) {
		return m.MasterServiceClient.PutRevoke(ctx, in)
	})
	return err
}

// fastLink is the fastrpc connection a slot came on.
type fastLink struct {
	m *fastMaster
	c *fastrpc.Client
}

// live reports whether the connection is still the client's live fast
// connection. It checks the socket (Alive: the client has no reader
// goroutine that would notice a master restart on its own), so a put slot
// is never written after the master that reserved it went away.
func (l fastLink) live() bool {
	l.m.mu.Lock()
	same := l.m.conn == l.c
	l.m.mu.Unlock()
	return same && l.c.Alive()
}

func (m *fastMaster) GetReplicaList(ctx context.Context, in *pb.KeyRequest, opts ...grpc.CallOption) (*pb.ObjectInfo, error) {
	return fastCall(ctx, m, pb.FastGetReplicaList, in, func(ctx context.Context) (*pb.ObjectInfo, error) {
		return m.MasterServiceClient.GetReplicaList(ctx, in, opts...)
	})
}

func (m *fastMaster) Exist(ctx context.Context, in *pb.KeyRequest, opts ...grpc.CallOption) (*pb.ExistResponse, error) {
	return fastCall(ctx, m, pb.FastExist, in, func(ctx context.Context) (*pb.ExistResponse, error) {
		return m.MasterServiceClient.Exist(ctx, in, opts...)
	})
}

func (m *fastMaster) BatchExist(ctx context.Context, in *pb.BatchKeysRequest, opts ...grpc.CallOption) (*pb.BatchExistResponse, error) {
	return fastCall(ctx, m, pb.FastBatchExist, in, func(ctx context.Context) (*pb.BatchExistResponse, error) {
		return m.MasterServiceClient.BatchExist(ctx, in, opts...)
	})
}

func (m *fastMaster) BatchGetReplicaList(ctx context.Context, in *pb.BatchKeysRequest, opts ...grpc.CallOption) (*pb.BatchObjectInfo, error) {
	return fastCall(ctx, m, pb.FastBatchGetReplicaList, in, func(ctx context.Context) (*pb.BatchObjectInfo, error) {
		return m.MasterServiceClient.BatchGetReplicaList(ctx, in, opts...)
	})
}

func (m *fastMaster) BatchPutStart(ctx context.Context, in *pb.BatchPutStartRequest, opts ...grpc.CallOption) (*pb.BatchPutStartResponse, error) {
	return fastCall(ctx, m, pb.FastBatchPutStart, in, func(ctx context.Context) (*pb.BatchPutStartResponse, error) {
		return m.MasterServiceClient.BatchPutStart(ctx, in, opts...)
	})
}

func (m *fastMaster) BatchPutCommit(ctx context.Context, in *pb.BatchPutCommitRequest, opts ...grpc.CallOption) (*pb.BatchPutCommitResponse, error) {
	return fastCall(ctx, m, pb.FastBatchPutCommit, in, func(ctx context.Context) (*pb.BatchPutCommitResponse, error) {
		return m.MasterServiceClient.BatchPutCommit(ctx, in, opts...)
	})
}

// batchExist asks for keys' existence with FastBatchExistBits (one byte
// per key in the answer). ok is false when the call should go over gRPC
// instead (no fast path, not sent, connection lost).
func (m *fastMaster) batchExist(ctx context.Context, keys []string) (out []bool, ok bool, err error) {
	c := m.client(ctx)
	if c == nil {
		return nil, false, nil
	}
	b, err := pb.Marshal(&pb.BatchKeysRequest{Keys: keys})
	if err != nil {
		return nil, false, nil
	}
	ans, err := c.CallBy(ctx, m.deadline(ctx), pb.FastBatchExistBits, b)
	switch {
	case err == nil:
	case fallBack(err):
		return nil, false, nil
	default:
		return nil, true, fmt.Errorf("store: batch exist: master rpc: %w", err)
	}
	if len(ans) != len(keys) {
		return nil, true, fmt.Errorf("store: batch exist: master answered %d keys of %d", len(ans), len(keys))
	}
	out = make([]bool, len(keys))
	for i, v := range ans {
		out[i] = v == 1
	}
	return out, true, nil
}
