package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/fastrpc"
	"github.com/kvcache-go/mooncake/internal/leader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"github.com/kvcache-go/mooncake/transfer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
)

// serviceConfig makes master calls wait for a connection (bounded by the
// call's deadline) and retry when the master was unreachable, as after a
// master restart.
const serviceConfig = `{"methodConfig":[{"name":[{"service":"mooncake.store.v1.MasterService"},{"service":"mooncake.store.v1.MasterTasks"}],
 "waitForReady":true,
 "retryPolicy":{"maxAttempts":4,"initialBackoff":"0.02s","maxBackoff":"0.5s","backoffMultiplier":2,
  "retryableStatusCodes":["UNAVAILABLE"]}}]}`

// PutOptions is the replication policy of one put.
type PutOptions struct {
	Replicas          int           // replicas on distinct segments (0 = Config.Replicas); best effort
	PreferredSegments []string      // segments tried first
	SoftPin           bool          // evicted only after unpinned objects
	SoftPinTTL        time.Duration // 0 = the master's default (30m)
	HardPin           bool          // never evicted
	promoteSeq        uint64        // promotion of this disk copy version (internal)
	Upsert            bool          // overwrite an existing value instead of failing with ErrExists
	PreferLocal       bool          // first replica on this client's own segment (Mooncake's prefer_alloc_in_same_node)
	KeepSoftPin       bool          // an upsert keeps the key's current soft pin (Mooncake's SoftPinAction PRESERVE)
}

// Replica is where one copy of an object lives.
type Replica struct {
	Segment  string
	Endpoint string
	Addr     uint64
	Size     uint64
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key          string
	Size         uint64
	CRC32C       uint32
	Replicas     []Replica
	Created      time.Time
	LastAccess   time.Time
	LeaseUntil   time.Time
	SoftPinUntil time.Time
	HardPin      bool
	Disk         []DiskReplica // copies on nodes' disk tiers (disk.go)
}

// KeyInfo is one row of List.
type KeyInfo struct {
	Key      string
	Size     uint64
	Replicas int
}

// Client talks to the master and moves values with the transfer engine. It
// may contribute a segment of its own memory (Config.SegmentSize), which it
// keeps mounted (remounting after a master restart) until Close. All
// methods are safe for concurrent use.
type Client struct {
	cfg   Config
	log   *slog.Logger
	conn  *grpc.ClientConn
	rpc   pb.MasterServiceClient // fast: the hot calls over fastrpc when the master speaks it
	puts  putRPC                 // fast: the put calls, on the transport chosen at New (put.go)
	fast  *fastMaster
	clock clock.Clock // lease timing and slot ages
	mover Mover
	stage *staging

	segment     []byte // contributed memory (nil for a pure client)
	segmentSpec *pb.Segment

	stop    chan struct{}
	stopCtx context.Context // cancelled when stop is closed
	stopFn  context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Once
	closed  chan struct{}

	slotMu sync.Mutex
	slots  []*putSlot // reserved by the master for our next small puts (slot.go)

	mu              sync.Mutex
	plainRC         atomic.Pointer[pb.ReplicateConfig] // rcToPB of options without a policy (shared, read only)
	durable         atomic.Bool                        // the master asked for object headers (stage room for them)
	keyPrefix       atomic.Pointer[string]             // the tenant namespace the master reported (headers carry it)
	remounts        int
	restored        int              // objects the master took over at remounts
	zeroed          []*pb.HeaderRef  // tombstones zeroed, to report in the next ping
	scrubbed        []*pb.Extent     // freed extents zeroed, to report in the next ping (scrub.go)
	scrubBusy       bool             // the ping worker holds extents to zero
	onDisk          []*pb.HeldObject // objects offloaded to the disk tier, to report in the next ping
	pingFailures    int              // consecutive failed pings
	lastPingOK      time.Time        // last successful ping (or mount)
	remountSt       remountState     // remount.go
	pingJobs        chan pingJob     // to the ping worker (pingwork.go)
	pingWake        chan struct{}    // ping now: the connection to the master is back (pingwake.go); nil without a segment
	diskRemoveLater []*pb.HeldObject // disk copies to delete, named while the worker was busy
	taskBusy        atomic.Bool      // copy/move tasks are running (tasks.go)

	diskReads     atomic.Uint64                 // values this client read from disk tiers (DiskReads)
	diskSource    uint64                        // the disk tier's range registered with the mover (disk.go); 0 = none
	hot           *hotCache                     // Config.HotCache (hotcache.go); nil: off
	graceOverride atomic.Pointer[time.Duration] // CloseWithGrace's grace, instead of Config.UnmountGrace

	beforeZero func([]*pb.HeaderRef) // tests: called before zeroHeaders writes
}

// Health is the client's view of its link to the master.
type Health struct {
	Remounts       int       // remounts after NEED_REMOUNT
	RemountPending bool      // a remount failed: the master may not know all our objects yet
	PingFailures   int       // consecutive failed pings (0 when the master answers)
	LastPingOK     time.Time // last time the master answered
}

// Health reports the state of the client's link to the master.
func (c *Client) Health() Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Health{Remounts: c.remounts, RemountPending: c.remountSt.pending, PingFailures: c.pingFailures, LastPingOK: c.lastPingOK}
}

// New connects to the master, registers the staging buffer, contributes and
// mounts a segment when Config.SegmentSize > 0, and starts the ping loop.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.ClientID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ClientID = cfg.Mover.Name() + "/" + hex.EncodeToString(b[:])
	}
	conn, err := dialMaster(cfg)
	if err != nil {
		return nil, err
	}
	fast := newFastMaster(pb.NewMasterServiceClient(conn), cfg)
	c := &Client{cfg: cfg, log: cfg.Logger, conn: conn, rpc: fast, puts: fast, fast: fast, clock: cfg.Clock, mover: cfg.Mover,
		stop: make(chan struct{}), closed: make(chan struct{})}
	c.stopCtx, c.stopFn = context.WithCancel(context.Background())
	fail := func(err error) (*Client, error) {
		c.stopFn()
		c.release()
		return nil, err
	}
	if c.hot, err = newHotCache(cfg.HotCache); err != nil {
		return fail(err)
	}
	buf := make([]byte, cfg.LocalBufferSize)
	if err := c.mover.RegisterBytes(buf, "cpu:0"); err != nil {
		return fail(fmt.Errorf("store: register staging buffer: %w", err))
	}
	c.stage = newStaging(buf)
	if err := c.join(ctx); err != nil {
		return fail(err)
	}
	c.lastPingOK = c.clock.Now()
	c.pingJobs = make(chan pingJob)
	if c.segmentSpec != nil {
		c.pingWake = make(chan struct{}, 1)
		c.wg.Add(1)
		go c.watchMaster(c.pingWake)
	}
	c.wg.Add(1)
	go c.pingLoop()
	return c, nil
}

// dialMaster opens the connection to the master. An HA address
// (etcd://h1:2379;h2:2379) resolves to the elected leader and follows it;
// a plain host:port is dialled as is.
func dialMaster(cfg Config) (*grpc.ClientConn, error) {
	target, opts, err := leader.DialTarget(cfg.Master, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("store: %w: %w", ErrInvalid, err)
	}
	// A refused credential reads as ErrUnauthorized (errors.Is) on every
	// call, the gRPC status kept.
	opts = append(opts, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, callOpts...)
		if grpcstatus.Code(err) == codes.Unauthenticated {
			return unauthorizedErr{grpcstatus.Convert(err)}
		}
		return err
	}))
	var md []string
	if cred := cfg.credential(); cred != "" {
		md = append(md, "authorization", "Bearer "+cred)
	}
	if claim := cfg.tenantClaim(); claim != "" {
		md = append(md, tenant.IDHeader, claim)
	}
	if len(md) > 0 {
		opts = append(opts, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, md...), method, req, reply, cc, callOpts...)
		}))
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	conn, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(serviceConfig),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second,
			Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}))...)
	if err != nil {
		return nil, fmt.Errorf("store: dial master %s: %w", cfg.Master, err)
	}
	return conn, nil
}

// join makes the client known to the master: it allocates and mounts the
// contributed segment when Config.SegmentSize > 0, and otherwise registers
// as a live client without segments.
func (c *Client) join(ctx context.Context) error {
	if c.cfg.SegmentSize == 0 && c.cfg.Segment == nil {
		err := c.call(ctx, func(ctx context.Context) (*pb.Status, error) {
			r, err := c.rpc.RemountSegments(ctx, &pb.RemountSegmentsRequest{ClientId: c.cfg.ClientID})
			return r.GetStatus(), err
		})
		if err != nil {
			return fmt.Errorf("store: register with master %s: %w", c.cfg.Master, err)
		}
		return nil
	}
	seg, err := c.contribute()
	if err != nil {
		return err
	}
	c.segment = seg
	c.segmentSpec = &pb.Segment{Name: cmp.Or(c.cfg.SegmentName, c.mover.Name()), Endpoint: c.mover.Name(),
		Base: uint64(transfer.AddrOf(seg)), Size: uint64(len(seg))}
	if d := c.cfg.Disk; d != nil {
		c.segmentSpec.DiskUrl, c.segmentSpec.OffloadOnEvict, c.segmentSpec.PromotionOnHit = d.URL(), d.OffloadOnEvict(), d.PromotionOnHit()
		c.registerDiskSource()
		// A node restarting with its disk tier reports what the disk holds
		// (in chunks, as a remount).
		var st remountStats
		st, err = c.remount(ctx, []*pb.Segment{c.segmentSpec}, c.diskHeld(d.Held()))
		if err == nil {
			c.restored += int(st.restored)
		}
	} else {
		var proof []byte
		if proof, err = c.mountProof(c.segmentSpec); err != nil {
			return err
		}
		err = c.call(ctx, func(ctx context.Context) (*pb.Status, error) {
			return c.rpc.MountSegment(ctx, &pb.MountSegmentRequest{ClientId: c.cfg.ClientID, Segment: c.segmentSpec, Proof: proof})
		})
	}
	if err != nil {
		return fmt.Errorf("store: mount segment: %w", err)
	}
	return nil
}

// mountProof is the proof of mount of seg (Config.MountProof; nil when
// unset).
func (c *Client) mountProof(seg *pb.Segment) ([]byte, error) {
	if c.cfg.MountProof == nil {
		return nil, nil
	}
	p, err := c.cfg.MountProof(c.cfg.ClientID, seg.Endpoint, seg.Base, seg.Size)
	if err != nil {
		return nil, fmt.Errorf("store: proof of mount: %w", err)
	}
	return p, nil
}

// ID is this client's id at the master.
func (c *Client) ID() string { return c.cfg.ClientID }

// SegmentName is the name of the segment this client contributes ("" if none).
func (c *Client) SegmentName() string {
	if c.segmentSpec == nil {
		return ""
	}
	return c.segmentSpec.Name
}

// Segment exposes the contributed memory (tests and diagnostics only).
func (c *Client) Segment() []byte { return c.segment }

// Restored counts the objects of this client's segment that masters took
// over when it remounted (durable metadata).
func (c *Client) Restored() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restored
}

// Remounts counts how often the client remounted after NEED_REMOUNT.
func (c *Client) Remounts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.remounts
}

func (c *Client) release() {
	c.releaseDiskSource()
	if c.stage != nil {
		_ = c.mover.Unregister(transfer.AddrOf(c.stage.buf))
	}
	switch {
	case c.segment == nil:
	case c.cfg.Segment != nil:
		_ = c.mover.Unregister(transfer.AddrOf(c.segment))
	default:
		_ = c.mover.FreeManaged(c.segment)
	}
	c.fast.close()
	_ = c.conn.Close()
}

// contribute is the memory of the contributed segment: Config.Segment,
// registered with the transfer engine, or SegmentSize bytes of managed memory.
func (c *Client) contribute() ([]byte, error) {
	if seg := c.cfg.Segment; seg != nil {
		if len(seg) == 0 {
			return nil, fmt.Errorf("store: %w: empty segment memory", ErrInvalid)
		}
		if err := c.mover.RegisterBytes(seg, "cpu:0"); err != nil {
			return nil, fmt.Errorf("store: register segment memory: %w", err)
		}
		return seg, nil
	}
	seg, err := c.mover.AllocateManaged(int(c.cfg.SegmentSize))
	if err != nil {
		return nil, fmt.Errorf("store: allocate segment of %d bytes: %w", c.cfg.SegmentSize, err)
	}
	return seg, nil
}

// CloseWithGrace is Close, waiting up to grace (instead of
// Config.UnmountGrace) for readers of the segment; 0 unmounts at once.
func (c *Client) CloseWithGrace(grace time.Duration) error {
	c.graceOverride.Store(&grace)
	return c.Close()
}

// Close stops pinging, unmounts the contributed segment gracefully (waiting
// up to UnmountGrace for readers holding leases), frees it and closes the
// master connection. Close does not close the transfer engine.
func (c *Client) Close() error {
	c.closeMu.Do(func() {
		close(c.stop)
		c.stopFn()
		c.wg.Wait()
		// Close has no caller's context: its calls are bounded instead.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.stopCtx), c.closeGrace()+2*c.cfg.RPCTimeout)
		defer cancel()
		c.dropSlots(ctx)
		if c.segmentSpec != nil {
			c.unmountGracefully(ctx)
		}
		c.leave(ctx)
		c.release()
		close(c.closed)
	})
	return nil
}

// Abort stops the client as a crash would: no more pings, no unmount (the
// master drops the segment after its client TTL). For fault tests.
func (c *Client) Abort() {
	c.closeMu.Do(func() {
		close(c.stop)
		c.stopFn()
		c.wg.Wait()
		c.fast.close()
		_ = c.conn.Close()
		close(c.closed)
	})
}

// closeGrace is how long Close waits for readers of the segment.
func (c *Client) closeGrace() time.Duration {
	if g := c.graceOverride.Load(); g != nil {
		return *g
	}
	return c.cfg.UnmountGrace
}

// unmountGracefully unmounts the segment and waits, within ctx, until the
// master has let it go.
// leave tells the master this client is gone (its segment unmounted), so
// that it is not dropped, and counted as dropped, after its TTL; a master
// that cannot be reached drops it then.
func (c *Client) leave(ctx context.Context) {
	if err := c.call(ctx, func(ctx context.Context) (*pb.Status, error) {
		return c.rpc.Leave(ctx, &pb.LeaveRequest{ClientId: c.cfg.ClientID})
	}); err != nil {
		c.log.Debug("store: leave", "err", err)
	}
}

func (c *Client) unmountGracefully(ctx context.Context) {
	grace := c.closeGrace()
	ctx, cancel := context.WithTimeout(ctx, grace+c.cfg.RPCTimeout)
	defer cancel()
	err := c.call(ctx, func(ctx context.Context) (*pb.Status, error) {
		return c.rpc.UnmountSegment(ctx, &pb.UnmountSegmentRequest{ClientId: c.cfg.ClientID, Name: c.segmentSpec.Name, GraceMs: grace.Milliseconds()})
	})
	if err != nil {
		c.log.Warn("store: graceful unmount", "segment", c.segmentSpec.Name, "err", err)
		return
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		si, err := c.rpc.QuerySegment(ctx, &pb.SegmentRequest{Name: c.segmentSpec.Name, ClientId: c.cfg.ClientID})
		if err != nil || si.Status.GetCode() != 0 {
			return // gone (or master unreachable: nothing more to wait for)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rpcCtx bounds one master call by RPCTimeout (or ctx's deadline if sooner):
// metadata calls are short, and an unreachable master must fail fast even
// under a long transfer deadline.
func (c *Client) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RPCTimeout)
}

func (c *Client) call(ctx context.Context, f func(context.Context) (*pb.Status, error)) error {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	st, err := f(ctx)
	if err != nil {
		return rpcErr("store", err)
	}
	return statusErr(st)
}

// rpcErr wraps the transport error of a master call: ErrUnauthorized with
// the master's reason when it refused the cluster secret.
func rpcErr(what string, err error) error {
	if grpcstatus.Code(err) == codes.Unauthenticated {
		return fmt.Errorf("%w: %s", ErrUnauthorized, grpcstatus.Convert(err).Message())
	}
	if errors.Is(err, fastrpc.ErrUnauthenticated) {
		return fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	return fmt.Errorf("%s: master rpc: %w", what, err)
}

// ping reports the client alive (and the tombstones and extents it
// zeroed) and handles the answer; more says it brought a full batch of
// tombstones, scrub that it brought extents to zero, which the worker
// zeroed within a ping interval.
func (c *Client) ping(ctx context.Context) (more, scrub bool, err error) {
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	zeroed, scrubbed := c.takeZeroed(), c.takeScrubbed()
	onDisk, dropped := c.diskPings()
	resp, err := c.rpc.Ping(ctx, &pb.PingRequest{ClientId: c.cfg.ClientID, Zeroed: zeroed, OnDisk: onDisk, DiskDropped: dropped, Scrubbed: scrubbed})
	if err != nil {
		c.requeueZeroed(zeroed)
		c.requeueScrubbed(scrubbed)
		c.mu.Lock()
		c.onDisk = append(onDisk, c.onDisk...) // dropped copies are re-reported by Held at the next remount
		c.mu.Unlock()
		return false, false, fmt.Errorf("store: ping master: %w", err)
	}
	done := c.handOff(resp) // the worker does the answer's work (pingwork.go)
	if len(resp.Tombstones) < drainBatch && len(resp.Scrub) == 0 {
		return false, false, nil
	}
	ok := drained(done, c.cfg.PingInterval)
	return ok && len(resp.Tombstones) >= drainBatch, ok && len(resp.Scrub) > 0, nil
}

// drainBatch is the tombstone count of a ping's answer from which the
// client pings again at once (the master sends at most 16,384 per answer);
// maxDrainPings bounds those extra pings per tick.
const (
	drainBatch    = 4096
	maxDrainPings = 16
)

func (c *Client) pingLoop() {
	defer c.wg.Done()
	c.wg.Add(1)
	go c.pingWorker(c.pingJobs)
	t := time.NewTicker(c.cfg.PingInterval)
	defer t.Stop()
	repoll := time.NewTimer(time.Hour)
	repoll.Stop()
	defer repoll.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.pingWake:
		case <-repoll.C:
		}
		// Under stopCtx: Close interrupts a ping stuck on a dead master.
		ctx, cancel := context.WithTimeout(c.stopCtx, c.cfg.PingInterval+c.cfg.RPCTimeout)
		more, scrub, err := c.ping(ctx)
		// A full answer of tombstones means the node's segment has more to
		// zero than one ping a tick drains (keys freed faster than that):
		// report those and fetch the next ones at once, a bounded number of
		// times per tick.
		for extra := 0; err == nil && more && extra < maxDrainPings; extra++ {
			more, scrub, err = c.ping(ctx)
		}
		if scrub { // report the zeroed extents soon (scrub.go)
			repoll.Reset(scrubRepoll)
		}
		if err == nil {
			c.pollTasks(ctx)
		}
		c.mu.Lock()
		if err != nil {
			c.pingFailures++
		} else {
			c.pingFailures, c.lastPingOK = 0, c.clock.Now()
		}
		c.mu.Unlock()
		if err != nil {
			c.log.Debug("store: ping", "err", err)
		}
		cancel()
	}
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	case <-c.stop:
		return true
	default:
		return false
	}
}

// rcToPB is the policy of a put with options o. Puts with no policy
// options (the common case) share one message, made once: the put path
// only reads it.
func (c *Client) rcToPB(o PutOptions) *pb.ReplicateConfig {
	n := o.Replicas
	if n == 0 {
		n = c.cfg.Replicas
	}
	if n == c.cfg.Replicas && o.PreferredSegments == nil && !o.PreferLocal && !o.SoftPin && o.SoftPinTTL == 0 && !o.HardPin &&
		o.promoteSeq == 0 && !o.KeepSoftPin {
		if rc := c.plainRC.Load(); rc != nil {
			return rc
		}
		rc := &pb.ReplicateConfig{Replicas: int32(n)}
		c.plainRC.Store(rc)
		return rc
	}
	pref := o.PreferredSegments
	if o.PreferLocal && c.segmentSpec != nil {
		pref = append([]string{c.segmentSpec.Name}, pref...)
	}
	return &pb.ReplicateConfig{Replicas: int32(n), PreferredSegments: pref, SoftPin: o.SoftPin,
		SoftPinTtlMs: o.SoftPinTTL.Milliseconds(), HardPin: o.HardPin, PromoteSeq: o.promoteSeq, KeepSoftPin: o.KeepSoftPin}
}

// directMin is the value size from which Put and Get register the caller's
// memory (or the result slice) for the transfer instead of copying through
// the staging buffer.
const directMin = 64 << 10

// Get returns the value of key. Replicas are tried local first; a replica
// that cannot be read or fails the CRC32C check is skipped for the next.
// A missing key fails with ErrNotFound, corrupt data with ErrCorrupt.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	var out []byte
	_, err := c.get(ctx, key, func(n uint64) ([]byte, func(), error) {
		if n >= directMin {
			b := make([]byte, n)
			if c.mover.RegisterBytes(b, "cpu:0") == nil {
				out = b
				return b, func() { _ = c.mover.Unregister(transfer.AddrOf(b)) }, nil
			}
		}
		st, err := c.stage.take(ctx, int(n))
		if err != nil {
			return nil, nil, fmt.Errorf("store: get %q of %d bytes: %w", key, n, err)
		}
		return st, func() { c.stage.put(st) }, nil
	}, func(b []byte) {
		if out == nil {
			out = append([]byte(nil), b...)
		}
	}, func(v []byte) (int, error) {
		out = bytes.Clone(v)
		return len(v), nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetInto reads key's value into dst, which must lie inside memory
// registered with RegisterBuffer, and returns its length. A dst shorter
// than the value fails with ErrBufferTooSmall. dst may hold partial data
// when an error is returned.
func (c *Client) GetInto(ctx context.Context, key string, dst []byte) (int, error) {
	return c.get(ctx, key, func(n uint64) ([]byte, func(), error) {
		if uint64(len(dst)) < n {
			return nil, nil, fmt.Errorf("store: get %q: value of %d bytes, buffer of %d: %w", key, n, len(dst), ErrBufferTooSmall)
		}
		return dst[:n], func() {}, nil
	}, nil, func(v []byte) (int, error) {
		if len(dst) < len(v) {
			return 0, fmt.Errorf("store: get %q: value of %d bytes, buffer of %d: %w", key, len(v), len(dst), ErrBufferTooSmall)
		}
		return copy(dst, v), nil
	})
}

// get fetches the replica list (taking a lease), reads replicas in order
// into the buffer from dest, verifies the CRC and calls done with the data.
// With the hot cache on, a value the master confirms current is handed to
// cached instead (hotcache.go), and a value read is offered to the cache.
func (c *Client) get(ctx context.Context, key string, dest func(uint64) ([]byte, func(), error), done func([]byte), cached func([]byte) (int, error)) (int, error) {
	if c.isClosed() {
		return 0, ErrClosed
	}
	var info *pb.ObjectInfo
	var leaseEnd time.Time
	var err error
	if c.hot != nil {
		start := c.clock.Now()
		var hit []byte
		if info, leaseEnd, hit, err = c.hotGet(ctx, key); hit != nil {
			n, err := cached(hit)
			c.hot.hitLat.observe(c.clock.Now().Sub(start))
			return n, err
		}
		defer func() { c.hot.missLat.observe(c.clock.Now().Sub(start)) }()
	} else {
		info, leaseEnd, err = c.replicaList(ctx, key)
	}
	if err != nil {
		return 0, err
	}
	buf, release, err := dest(info.Size)
	if err != nil {
		return 0, err
	}
	defer release()
	if err := c.readAny(ctx, key, info, leaseEnd, buf); err != nil {
		return 0, err
	}
	if c.hot != nil {
		c.hotFill(key, info, buf)
	}
	if done != nil {
		done(buf)
	}
	return len(buf), nil
}

// replicaList asks the master for key's replicas, which grants a read
// lease, and returns when the lease ends at the latest on this side.
func (c *Client) replicaList(ctx context.Context, key string) (*pb.ObjectInfo, time.Time, error) {
	// A hot call: fastMaster bounds it by RPCTimeout itself.
	asked := c.clock.Now() // the lease starts no earlier than this on the master's side
	info, err := c.rpc.GetReplicaList(ctx, &pb.KeyRequest{Key: key})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: get %q: master rpc: %w", key, err)
	}
	if err := statusErr(info.Status); err != nil {
		return nil, time.Time{}, fmt.Errorf("store: get %q: %w", key, err)
	}
	return info, asked.Add(time.Duration(info.LeaseTtlMs) * time.Millisecond), nil
}

// readAny reads the replicas into buf in order (local first) until one is
// read whole, within the lease, with the right CRC32C.
func (c *Client) readAny(ctx context.Context, key string, info *pb.ObjectInfo, leaseEnd time.Time, buf []byte) error {
	// The read must end within the lease: afterwards the space may be
	// reused. Each replica gets an equal share of the lease left, so a
	// hung node leaves time to read the next replica; the last one (usually
	// the only one) gets all that is left.
	var errs []error
	reps := c.order(info.Replicas)
	for i, r := range reps {
		until := leaseEnd
		if left := len(reps) - i; left > 1 {
			now := c.clock.Now()
			until = now.Add(leaseEnd.Sub(now) / time.Duration(left))
		}
		crc, err := c.readReplica(ctx, until, r, buf)
		now := c.clock.Now()
		if err == nil && now.After(leaseEnd) {
			err = ErrLeaseExpired
		}
		if err != nil && !now.Before(leaseEnd) && ctx.Err() == nil {
			return fmt.Errorf("store: get %q: read from %s outlived the %dms lease: %w", key, r.Segment, info.LeaseTtlMs, ErrLeaseExpired)
		}
		if err == nil && crc != info.Crc32C {
			err = fmt.Errorf("%w on replica %s", ErrCorrupt, r.Segment)
		}
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("replica %s: %w", r.Segment, err))
		if ctx.Err() != nil {
			break
		}
	}
	gone := len(info.Disk) > 0 && len(reps) == 0
	for _, d := range info.Disk { // not in memory: a node's disk tier has it
		err := c.readDisk(ctx, key, d, info.Crc32C, buf)
		if err == nil {
			if info.Promote {
				c.promote(key, d.Seq, buf)
			}
			return nil
		}
		gone = gone && errors.Is(err, ErrNotFound)
		errs = append(errs, err)
	}
	if gone { // the only copies were on disk and are gone: a miss
		return fmt.Errorf("store: get %q: %w", key, errors.Join(errs...))
	}
	return readFailed(key, errs)
}

// readFailed is the error of a get whose every replica failed: ErrCorrupt
// when they all were corrupt, ErrNoReplica otherwise, wrapping each
// replica's error.
func readFailed(key string, errs []error) error {
	all := errors.Join(errs...)
	for _, e := range errs {
		if !errors.Is(e, ErrCorrupt) {
			return fmt.Errorf("store: get %q: %w: %w", key, ErrNoReplica, all)
		}
	}
	return fmt.Errorf("store: get %q: every replica is corrupt: %w", key, all)
}

// order puts replicas held by this process's engine first.
func (c *Client) order(reps []*pb.Replica) []*pb.Replica {
	if len(reps) < 2 {
		return reps
	}
	out := make([]*pb.Replica, 0, len(reps))
	me := c.mover.Name()
	for _, r := range reps {
		if r.Endpoint == me {
			out = append(out, r)
		}
	}
	for _, r := range reps {
		if r.Endpoint != me {
			out = append(out, r)
		}
	}
	return out
}

// pipelineMin is the value size from which a read is split into
// pipelineParts requests in flight together, so that the CRC32C of the parts
// that have arrived is computed while the others are still moving (and, over
// shared memory, the engine copies the parts on several cores). Measured
// with 1 MiB get-into over shared memory: p50 ~200 -> ~150 us; over TCP the
// same within noise.
const (
	pipelineMin   = 1 << 20
	pipelineParts = 4
)

// readParts reads buf with read(lo, hi) and returns the CRC32C of what it
// read: from pipelineMin bytes in pipelineParts parts in flight together,
// the CRC32C of each part computed as it arrives (in order, combined)
// while the later parts are still moving; smaller values in one read.
func readParts(buf []byte, read func(lo, hi int) error) (uint32, error) {
	if len(buf) < pipelineMin {
		if err := read(0, len(buf)); err != nil {
			return 0, err
		}
		return Checksum(buf), nil
	}
	chunk := (len(buf) + pipelineParts - 1) / pipelineParts
	var errs [pipelineParts]error
	done := make(chan int, pipelineParts)
	for i := range pipelineParts {
		go func() { // each sends exactly once; all are received below
			errs[i] = read(i*chunk, min((i+1)*chunk, len(buf)))
			done <- i
		}()
	}
	var arrived [pipelineParts]bool
	var crc uint32
	next := 0
	for range pipelineParts {
		arrived[<-done] = true
		for next < pipelineParts && arrived[next] {
			lo, hi := next*chunk, min((next+1)*chunk, len(buf))
			if errs[next] == nil { // CRC32C(A||B) from the parts, in order
				crc = crc32Combine(crc, crc32.Checksum(buf[lo:hi], castagnoli), int64(hi-lo))
			}
			next++
		}
	}
	return crc, errors.Join(errs[:]...)
}

// readReplica reads r into buf, ending by until, and returns the CRC32C of
// what it read.
func (c *Client) readReplica(ctx context.Context, until time.Time, r *pb.Replica, buf []byte) (uint32, error) {
	seg, err := c.mover.OpenSegment(ctx, r.Endpoint) // the engine bounds a first open itself
	if err != nil {
		return 0, fmt.Errorf("%w: open segment %s: %w", ErrTransfer, r.Endpoint, err)
	}
	g := grantString(r.Grant) // a lane sends it once for all the pipelined parts
	read := func(lo, hi int) error {
		return c.transferUntil(ctx, until, []transfer.Request{{Op: transfer.OpRead, Local: transfer.AddrOf(buf[lo:hi]), Segment: seg, Remote: r.Addr + uint64(lo), Length: hi - lo, Grant: g}})
	}
	crc, err := readParts(buf, read)
	if err != nil {
		return 0, fmt.Errorf("%w: read: %w", ErrTransfer, err)
	}
	return crc, nil
}

// untilMover is a Mover that takes a deadline of its own
// (transfer.Engine.TransferUntil): a small local copy then needs no timer.
type untilMover interface {
	TransferUntil(ctx context.Context, deadline time.Time, reqs []transfer.Request) error
}

// transferUntil moves reqs by deadline: with TransferUntil when the mover
// has it, under a context with that deadline otherwise.
func (c *Client) transferUntil(ctx context.Context, deadline time.Time, reqs []transfer.Request) error {
	if m, ok := c.mover.(untilMover); ok {
		return m.TransferUntil(ctx, deadline, reqs)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return c.mover.Transfer(ctx, reqs)
}

// RegisterBuffer registers memory for PutFrom and GetInto.
func (c *Client) RegisterBuffer(b []byte) error { return c.mover.RegisterBytes(b, "cpu:0") }

// UnregisterBuffer undoes RegisterBuffer.
func (c *Client) UnregisterBuffer(b []byte) error { return c.mover.Unregister(transfer.AddrOf(b)) }

// Exist reports whether a complete object is stored under key.
func (c *Client) Exist(ctx context.Context, key string) (bool, error) {
	// A hot call: fastMaster bounds it by RPCTimeout itself.
	r, err := c.rpc.Exist(ctx, &pb.KeyRequest{Key: key})
	if err != nil {
		return false, fmt.Errorf("store: exist %q: master rpc: %w", key, err)
	}
	return r.Exists, statusErr(r.Status)
}

// Stat returns an object's metadata without taking a lease.
func (c *Client) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	r, err := c.rpc.Query(rctx, &pb.KeyRequest{Key: key})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("store: stat %q: master rpc: %w", key, err)
	}
	if err := statusErr(r.Status); err != nil {
		return ObjectInfo{}, fmt.Errorf("store: stat %q: %w", key, err)
	}
	if !r.Complete {
		return ObjectInfo{}, fmt.Errorf("store: stat %q: put in progress: %w", key, ErrNotFound)
	}
	return infoFromPB(r), nil
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func infoFromPB(r *pb.ObjectInfo) ObjectInfo {
	o := ObjectInfo{Key: r.Key, Size: r.Size, CRC32C: r.Crc32C, Created: msTime(r.CreatedUnixMs), LastAccess: msTime(r.LastAccessUnixMs),
		LeaseUntil: msTime(r.LeaseUntilUnixMs), SoftPinUntil: msTime(r.SoftPinUntilUnixMs), HardPin: r.HardPin}
	for _, rp := range r.Replicas {
		o.Replicas = append(o.Replicas, Replica{Segment: rp.Segment, Endpoint: rp.Endpoint, Addr: rp.Addr, Size: rp.Size})
	}
	o.Disk = diskFromPB(r.Disk)
	return o
}

// Remove deletes key. A leased object fails with ErrHasLease unless force.
func (c *Client) Remove(ctx context.Context, key string, force bool) error {
	c.hotForget(key)
	var tombs []*pb.HeaderRef
	sent := time.Now()
	err := c.call(ctx, func(ctx context.Context) (*pb.Status, error) {
		r, err := c.rpc.Remove(ctx, &pb.RemoveRequest{Key: key, Force: force})
		tombs = r.GetTombstones()
		return r.GetStatus(), err
	})
	if err != nil {
		return fmt.Errorf("store: remove %q: %w", key, err)
	}
	c.zeroHeaders(ctx, sent, tombs)
	return nil
}

// RemoveByRegex removes the objects whose key matches the RE2 pattern
// (leased ones only if force) and returns how many were removed. The master
// removes them chunk by chunk (a bounded answer each); the client zeroes each
// chunk's headers before it asks for the next, so a removed object cannot come
// back after a master restart. Each chunk is one master call bounded by
// RPCTimeout; on an error the count so far is returned with it.
func (c *Client) RemoveByRegex(ctx context.Context, pattern string, force bool) (int, error) {
	c.hotForgetMatching(pattern)
	return c.removePaged(ctx, "store: remove by regex", func(ctx context.Context, after string) (*pb.CountResponse, error) {
		return c.rpc.RemoveByRegex(ctx, &pb.RemoveByRegexRequest{Pattern: pattern, Force: force, After: after, Paged: true})
	})
}

// RemoveAll removes every object (leased ones only if force) and returns
// how many were removed, chunk by chunk as RemoveByRegex.
func (c *Client) RemoveAll(ctx context.Context, force bool) (int, error) {
	c.hotForgetMatching("")
	return c.removePaged(ctx, "store: remove all", func(ctx context.Context, after string) (*pb.CountResponse, error) {
		return c.rpc.RemoveAll(ctx, &pb.RemoveAllRequest{Force: force, After: after, Paged: true})
	})
}

func (c *Client) removePaged(ctx context.Context, what string, page func(ctx context.Context, after string) (*pb.CountResponse, error)) (int, error) {
	n, after := 0, ""
	for {
		rctx, cancel := c.rpcCtx(ctx)
		sent := time.Now()
		r, err := page(rctx, after)
		cancel()
		if err != nil {
			return n, rpcErr(what, err)
		}
		if err := statusErr(r.Status); err != nil {
			return n, err
		}
		c.zeroHeaders(ctx, sent, r.Tombstones)
		n += int(r.Count)
		if r.Next == "" {
			return n, nil
		}
		after = r.Next
	}
}

// List returns up to limit keys with the prefix after the cursor, in key
// order, and the cursor of the next page ("" on the last page).
func (c *Client) List(ctx context.Context, prefix, after string, limit int) ([]KeyInfo, string, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	r, err := c.rpc.List(rctx, &pb.ListRequest{Prefix: prefix, After: after, Limit: int32(limit)})
	if err != nil {
		return nil, "", fmt.Errorf("store: list: master rpc: %w", err)
	}
	if err := statusErr(r.Status); err != nil {
		return nil, "", fmt.Errorf("store: list: %w", err)
	}
	out := make([]KeyInfo, len(r.Keys))
	for i, k := range r.Keys {
		out[i] = KeyInfo{Key: k.Key, Size: k.Size, Replicas: int(k.Replicas)}
	}
	return out, r.Next, nil
}
