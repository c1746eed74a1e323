package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
)

// grpcScheme is the scheme of the gRPC target DialTarget builds; the
// resolver is passed per connection (grpc.WithResolvers), never registered
// globally.
const grpcScheme = "mooncake-master-ha"

// DialTarget turns a master address into a gRPC target and the dial
// options it needs. A plain "host:port" is returned as is; an HA address
// "etcd://h1:2379;h2:2379[/CLUSTER]" becomes a target resolved from etcd:
// the connection follows the elected leader, re-reading it when the leader
// key changes and whenever gRPC reports a failed connection.
func DialTarget(addr string, log *slog.Logger) (string, []grpc.DialOption, error) {
	if !IsHA(addr) {
		return addr, nil, nil
	}
	t, err := ParseTarget(addr)
	if err != nil {
		return "", nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &builder{target: t, log: log}
	return grpcScheme + ":///" + t.Cluster, []grpc.DialOption{grpc.WithResolvers(b)}, nil
}

type builder struct {
	target Target
	log    *slog.Logger
}

func (b *builder) Scheme() string { return grpcScheme }

func (b *builder) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	cli, err := NewEtcdClient(b.target.Endpoints)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &etcdResolver{cc: cc, cli: cli, key: Key(b.target.Cluster), log: b.log, cancel: cancel, now: make(chan struct{}, 1)}
	r.wg.Add(1)
	go r.run(ctx)
	return r, nil
}

// NewEtcdClient opens an etcd client (go.etcd.io/etcd/client/v3, never the
// server) that does not log: errors surface through our own calls. The
// election (internal/election) uses it too. gRPC keepalives (EtcdKeepAlive)
// find a member that stopped answering with its sockets open (frozen,
// partitioned): its connection is closed, calls in flight fail over to
// the other members instead of hanging, and the election's lease keeps
// being refreshed through them.
func NewEtcdClient(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: EtcdKeepAlive, DialKeepAliveTimeout: EtcdKeepAliveTimeout, PermitWithoutStream: true})
	if err != nil {
		return nil, fmt.Errorf("leader: etcd %v: %w", endpoints, err)
	}
	return cli, nil
}

// EtcdKeepAlive is the period of the etcd clients' gRPC keepalive pings
// (gRPC's minimum) and EtcdKeepAliveTimeout how long one may go
// unanswered: a silent member's connection is closed after about 12 s.
const (
	EtcdKeepAlive        = 10 * time.Second
	EtcdKeepAliveTimeout = 2 * time.Second
)

// etcdResolver watches the election prefix and points the connection at
// the current leader's address.
type etcdResolver struct {
	cc     resolver.ClientConn
	cli    *clientv3.Client
	key    string
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	now    chan struct{}
}

// ResolveNow asks for a fresh read (gRPC calls it after a failed connection).
func (r *etcdResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// Close stops the watch and closes the etcd client.
func (r *etcdResolver) Close() {
	r.cancel()
	r.wg.Wait()
	_ = r.cli.Close()
}

func (r *etcdResolver) run(ctx context.Context) {
	defer r.wg.Done()
	var last View
	retry := 50 * time.Millisecond
	for ctx.Err() == nil {
		v, rev, err := ReadLeader(ctx, r.cli, r.key)
		switch {
		case err == nil && v != last:
			r.log.Info("leader: master leader", "addr", v.Addr, "view", v.Version)
			last = v
			_ = r.cc.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: v.Addr}}})
		case err != nil && last == (View{}):
			// Nothing to dial yet: calls wait (wait-for-ready) or fail with this.
			r.cc.ReportError(err)
		}
		// On ErrNoLeader the last address is kept: the old leader is
		// gone, calls wait for the new one, published by the next event.
		if rev == 0 { // etcd unreachable: retry
			t := time.NewTimer(retry)
			select {
			case <-ctx.Done():
			case <-r.now:
			case <-t.C:
			}
			t.Stop()
			retry = min(2*retry, time.Second)
			continue
		}
		retry = 50 * time.Millisecond
		wctx, wcancel := context.WithCancel(ctx)
		wch := r.cli.Watch(wctx, r.key+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		select {
		case <-ctx.Done():
		case <-r.now:
		case <-wch: // any change (or a broken watch): read again
		}
		wcancel()
	}
}

// ReadLeader reads the current leader's view under key (see Key) and the
// etcd revision of the read (0 when etcd could not be read).
func ReadLeader(ctx context.Context, cli *clientv3.Client, key string) (View, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key+"/", clientv3.WithPrefix())
	if err != nil {
		return View{}, 0, fmt.Errorf("leader: read leader: %w", err)
	}
	cands := make([]Candidate, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		cands = append(cands, Candidate{Value: kv.Value, CreateRevision: kv.CreateRevision})
	}
	v, err := Leader(cands)
	if err != nil && !errors.Is(err, ErrNoLeader) {
		err = fmt.Errorf("leader: %w", err)
	}
	return v, resp.Header.Revision, err
}
