package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	"github.com/kvcache-go/mooncake/internal/leader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
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
type fastMaster struct {
	pb.MasterServiceClient
	addr    string        // "" = gRPC only (HA addresses, Config.NoFastRPC)
	lane    int           // which of the pool's connections to addr it shares
	timeout time.Duration // bound of each hot call (Config.RPCTimeout)

	mu      sync.Mutex
	conn    *fastrpc.Client
	backoff time.Duration
	retryAt time.Time // no dial before this after a failed one
	closed  bool
}

// fastDialTimeout bounds one dial of the fast path (the call then goes
// over gRPC, which waits for the master as before).
const fastDialTimeout = time.Second

func newFastMaster(rpc pb.MasterServiceClient, cfg Config) *fastMaster {
	m := &fastMaster{MasterServiceClient: rpc, timeout: cfg.RPCTimeout, lane: int(fastLanes.Add(1)) % sharedLanes}
	if _, _, err := net.SplitHostPort(cfg.Master); err == nil && !leader.IsHA(cfg.Master) && !cfg.NoFastRPC {
		m.addr = cfg.Master
	}
	return m
}

// client returns the fastrpc connection, taking one from the process's
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
		sharedConns.release(m.addr, m.lane, m.conn)
		m.conn = nil
	}
	if m.closed || time.Now().Before(m.retryAt) {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, fastDialTimeout)
	defer cancel()
	c, err := sharedConns.get(dctx, m.addr, m.lane)
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
		sharedConns.release(m.addr, m.lane, m.conn)
		m.conn = nil
	}
}

// sharedConns is the process's pool of fastrpc connections: the clients
// of one process share a few connections per master address (connection
// reuse), sharedLanes of them, clients spread over them in turn.
// Concurrent calls of the clients on one connection share the system calls
// of both ends: the master reads their requests together and answers them
// in one write, the caller reading the connection takes the others'
// answers with its own (fastrpc.Client), and callers that write while
// another writes leave in its write. One connection per P (GOMAXPROCS)
// lets the master serve them on as many goroutines at once. On 2 cores,
// 8 clients of 4 KiB gets went from 68k calls per second with a connection
// each to ~90k with one shared connection and ~105k with two
// (docs/store.md, session E). Clients in different processes each have
// their own connections, as before.
var sharedConns = connPool{conns: map[poolKey]*pooledConn{}}

// sharedLanes is the number of connections per master address in the
// pool: one per P, at most maxSharedLanes.
var sharedLanes = min(runtime.GOMAXPROCS(0), maxSharedLanes)

const maxSharedLanes = 8

// fastLanes numbers the clients, to spread them over the lanes.
var fastLanes atomic.Int64

type poolKey struct {
	addr string
	lane int
}

type connPool struct {
	mu    sync.Mutex
	conns map[poolKey]*pooledConn
}

type pooledConn struct {
	c    *fastrpc.Client
	refs int
}

// get returns a working connection to addr, dialling one when the pool
// has none; the caller holds a reference until it calls release.
func (p *connPool) get(ctx context.Context, addr string, lane int) (*fastrpc.Client, error) {
	key := poolKey{addr, lane}
	p.mu.Lock()
	if pc := p.conns[key]; pc != nil && pc.c.Err() == nil {
		pc.refs++
		p.mu.Unlock()
		return pc.c, nil
	}
	p.mu.Unlock()
	c, err := fastrpc.Dial(ctx, addr) // outside the lock: other addresses go on
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc := p.conns[key]; pc != nil && pc.c.Err() == nil { // another client dialled meanwhile
		_ = c.Close()
		pc.refs++
		return pc.c, nil
	}
	// None, or a dead one: its holders close it as they notice (release).
	p.conns[key] = &pooledConn{c: c, refs: 1}
	return c, nil
}

// release gives a reference back; the last one closes the connection. A
// connection the pool no longer lists (it died and was replaced) is
// closed at once (its calls have failed already).
func (p *connPool) release(addr string, lane int, c *fastrpc.Client) {
	key := poolKey{addr, lane}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc := p.conns[key]; pc != nil && pc.c == c {
		if pc.refs--; pc.refs > 0 {
			return
		}
		delete(p.conns, key)
	}
	_ = c.Close()
}

// deadline is when a hot call started now gives up: RPCTimeout from now,
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
	deadline := m.deadline(ctx)
	c := m.client(ctx)
	if c == nil {
		return slowCall(ctx, deadline, slow)
	}
	b, err := pb.Marshal(req)
	if err != nil {
		return slowCall(ctx, deadline, slow)
	}
	out, err := c.CallBy(ctx, deadline, method, b)
	switch {
	case err == nil:
	case fallBack(err):
		return slowCall(ctx, deadline, slow)
	default:
		return nil, err
	}
	resp := PR(new(R))
	if err := pb.Unmarshal(out, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func (m *fastMaster) PutStart(ctx context.Context, in *pb.PutStartRequest, opts ...grpc.CallOption) (*pb.PutStartResponse, error) {
	return fastCall(ctx, m, pb.FastPutStart, in, func(ctx context.Context) (*pb.PutStartResponse, error) {
		return m.MasterServiceClient.PutStart(ctx, in, opts...)
	})
}

func (m *fastMaster) PutEnd(ctx context.Context, in *pb.PutEndRequest, opts ...grpc.CallOption) (*pb.Status, error) {
	return fastCall(ctx, m, pb.FastPutEnd, in, func(ctx context.Context) (*pb.Status, error) {
		return m.MasterServiceClient.PutEnd(ctx, in, opts...)
	})
}

func (m *fastMaster) PutRevoke(ctx context.Context, in *pb.PutRevokeRequest, opts ...grpc.CallOption) (*pb.Status, error) {
	return fastCall(ctx, m, pb.FastPutRevoke, in, func(ctx context.Context) (*pb.Status, error) {
		return m.MasterServiceClient.PutRevoke(ctx, in, opts...)
	})
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

func (m *fastMaster) BatchPutEnd(ctx context.Context, in *pb.BatchPutEndRequest, opts ...grpc.CallOption) (*pb.BatchStatus, error) {
	return fastCall(ctx, m, pb.FastBatchPutEnd, in, func(ctx context.Context) (*pb.BatchStatus, error) {
		return m.MasterServiceClient.BatchPutEnd(ctx, in, opts...)
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

// current reports whether conn is the live fast connection. It checks the
// socket (Alive: the client has no reader goroutine that would notice a
// master restart on its own), so a put slot is never written after the
// master that reserved it went away.
func (m *fastMaster) current(conn *fastrpc.Client) bool {
	m.mu.Lock()
	same := conn != nil && m.conn == conn
	m.mu.Unlock()
	return same && conn.Alive()
}

// putCommit sends FastPutCommit. conn is the connection that carried it,
// nil when the fast path could not (no connection, not sent, lost before
// the answer, refused).
func (m *fastMaster) putCommit(ctx context.Context, req *pb.PutCommitRequest) (*pb.PutCommitResponse, *fastrpc.Client, error) {
	c := m.client(ctx)
	if c == nil {
		return nil, nil, nil
	}
	b, err := pb.Marshal(req)
	if err != nil {
		return nil, nil, nil
	}
	out, err := c.CallBy(ctx, m.deadline(ctx), pb.FastPutCommit, b)
	switch {
	case err == nil:
	case fallBack(err):
		return nil, nil, nil
	default:
		return nil, c, fmt.Errorf("store: put %q: master rpc: %w", req.Key, err)
	}
	var resp pb.PutCommitResponse
	if err := pb.Unmarshal(out, &resp); err != nil {
		return nil, c, fmt.Errorf("store: put %q: %w", req.Key, err)
	}
	return &resp, c, nil
}
