package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvcache-go/mooncake/internal/disktier"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

func init() {
	codeTable = append(codeTable,
		codeMapping{store.ErrNotFound, codeObjectNotFound},
		codeMapping{store.ErrExists, codeObjectExists},
		codeMapping{store.ErrHasLease, codeObjectHasLease},
		codeMapping{store.ErrLeaseExpired, codeLeaseExpired},
		codeMapping{store.ErrNoSpace, codeNoHandle},
		codeMapping{store.ErrTooLarge, codeInvalidParams},
		codeMapping{store.ErrInvalid, codeInvalidParams},
		codeMapping{store.ErrBufferTooSmall, codeInvalidParams},
		codeMapping{store.ErrCorrupt, codeTransferFail},
		codeMapping{store.ErrNoReplica, codeTransferFail},
		codeMapping{store.ErrTransfer, codeTransferFail},
		codeMapping{store.ErrClosed, codeInternal},
		codeMapping{store.ErrQuotaExceeded, codeTenantQuotaExceeded},
		codeMapping{store.ErrTenantNotRegistered, codeTenantNotRegistered},
	)
	codeHooks = append(codeHooks, storeRemoteCode, grpcCode)
}

// storeRemoteCode keeps the master's own numeric code.
func storeRemoteCode(err error) (int64, bool) {
	var re *store.RemoteError
	if errors.As(err, &re) && re.Code < 0 {
		return int64(re.Code), true
	}
	return 0, false
}

// grpcCode maps a failed master RPC to RPC_FAIL / RPC_TIMEOUT.
func grpcCode(err error) (int64, bool) {
	var gs interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &gs) {
		return 0, false
	}
	switch gs.GRPCStatus().Code() {
	case codes.DeadlineExceeded:
		return codeRPCTimeout, true
	case codes.OK:
		return 0, false
	default:
		return codeRPCFail, true
	}
}

// stores holds every open store client by handle.
var stores = newHandles[*storeState]()

// storeState is one store client and the transfer engine it owns.
type storeState struct {
	eng  *transfer.Engine // nil for a dummy client
	host string           // local_hostname when its port was taken (the engine has another), else ""
	c    storeClient      // a *store.Client, or a *dummyclient.Client
	regs regions

	disk  *disktier.Server // the disk tier behind our segment (store_disk.go), nil = none
	extra *extraSegments   // segments mounted with mount_segment (store_segments.go), nil for a dummy client

	mu   sync.Mutex
	bufs map[uint64][]byte // registered with register_buffer
}

// storeArgs is what setup() passes.
type storeArgs struct {
	host, metadata, protocol, device, master string
	segmentSize, bufferSize                  uint64
	disk                                     diskArgs          // SSD offload (store_disk.go)
	security                                 securityArgs      // tenant id, tenant token and TLS (store_security.go)
	env                                      map[string]string // setup-time environment (MC_STORE_LOCAL_HOT_*); missing names: os.Getenv
}

// storeEngineArgs is the configuration of a store client's transfer engine.
// It always uses the P2P handshake: storage nodes (`mooncake store`) and
// other clients are reached directly by their "host:port" segment names and
// publish nowhere, so a metadata_server from a Mooncake configuration
// (http://, etcd://, redis://, ...) is not needed and is ignored with a
// warning instead of making every transfer fail to find its segment.
// An empty protocol means auto (shared memory with same-host nodes).
func storeEngineArgs(a storeArgs) (transfer.Config, []string, error) {
	var note []string
	if m := strings.TrimSpace(a.metadata); m != "" && !strings.EqualFold(m, transfer.MetadataP2P) {
		note = append(note, fmt.Sprintf("metadata server %q ignored: store segments are found by P2P handshake", m))
	}
	cfg, warns, err := engineArgs(a.host, transfer.MetadataP2P, a.protocol, a.device)
	if err != nil {
		return cfg, nil, err
	}
	if cfg.Transport == transfer.TransportTCP && a.protocol == "" {
		cfg.Transport = transfer.TransportAuto
	}
	return cfg, append(note, warns...), nil
}

func openStore(ctx context.Context, a storeArgs) (*storeState, error) {
	if a.master == "" {
		return nil, errInvalid("no master address")
	}
	cfg, warns, err := storeEngineArgs(a)
	if err != nil {
		return nil, err
	}
	sec, err := a.security.resolve()
	if err != nil {
		return nil, err
	}
	for _, w := range warns {
		logger.Warn("store setup", "note", w)
	}
	cfg.Logger = logger.With("store", a.host)
	// With the grant key the engine serving this client's segments checks
	// grants on every incoming READ and WRITE, as a storage node's does.
	cfg.Grants = sec.grants
	eng, err := transfer.Open(ctx, cfg)
	segName := "" // the segment's name: the engine's own unless the port was taken
	if errors.Is(err, syscall.EADDRINUSE) && cfg.RPCPort != 0 {
		// Mooncake's engine never binds the port of local_hostname (it
		// takes a free one), so two stores given the same host:port work
		// there, and their segments share that name (the master keys
		// segments by UUID; placement spreads replicas over names). Take a
		// free port too, and keep local_hostname as the segment's name
		// (and get_hostname()'s answer); peers reach us by the endpoint.
		segName = net.JoinHostPort(cfg.LocalHostname, strconv.Itoa(cfg.RPCPort))
		logger.Warn("store setup: port taken, using a free one; the segment keeps the name", "local_hostname", a.host,
			"segment", segName, "err", err)
		cfg.RPCPort = 0
		eng, err = transfer.Open(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	disk, err := openDiskTier(a, cfg.LocalHostname)
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	hot, err := store.HotCacheFromEnv(func(k string) string { // Mooncake's MC_STORE_LOCAL_HOT_* variables
		if v, ok := a.env[k]; ok {
			return v
		}
		return os.Getenv(k)
	})
	if err != nil {
		_ = eng.Close()
		closeDisk(disk)
		return nil, err
	}
	mover := newNestedMover(eng)
	scfg := store.Config{HotCache: hot, Master: a.master, Mover: mover, SegmentSize: a.segmentSize, SegmentName: segName,
		LocalBufferSize: a.bufferSize, Secret: os.Getenv("MOONCAKE_SECRET"), TenantID: sec.tenantID, Token: sec.token, TLS: sec.tls,
		MountProof: sec.mountProof(), Logger: logger.With("store", eng.Name())}
	if disk != nil {
		scfg.Disk = disk
		scfg.PingInterval = diskPingInterval
	}
	c, err := store.New(ctx, scfg)
	if err != nil {
		_ = eng.Close()
		closeDisk(disk)
		return nil, sec.mountHint(err)
	}
	return &storeState{eng: eng, host: segName, c: c, disk: disk, extra: newExtraSegments(a.master, mover, sec), bufs: map[uint64][]byte{}}, nil
}

func (s *storeState) close() error {
	s.extra.closeAll()
	err := s.c.Close()
	closeDisk(s.disk)
	if s.eng == nil {
		return err
	}
	return errors.Join(err, s.eng.Close())
}

// ctx is the context of one store call. It carries no deadline of its own:
// the store client bounds each master RPC by its RPCTimeout (5s) and a read
// by its lease, and the transfer engine bounds each transfer by its Timeout
// (MC_TRANSFER_TIMEOUT), so a dead master fails a call in seconds.
func (s *storeState) ctx(int) (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// putConfigJSON is the ReplicateConfig the Python layer sends with a put
// (mc_store_put_ex, mc_store_batch_put_ex). Fields the Go client has no
// counterpart for (disk and NoF replica counts, data type, group ids) are
// logged by Python and not sent.
type putConfigJSON struct {
	ReplicaNum        int      `json:"replica_num"`
	SoftPin           bool     `json:"soft_pin"`
	SoftPinTTLMs      int64    `json:"soft_pin_ttl_ms"`
	HardPin           bool     `json:"with_hard_pin"`
	PreferredSegments []string `json:"preferred_segments"`
	SameNode          bool     `json:"prefer_alloc_in_same_node"`
	Upsert            bool     `json:"upsert"`
	KeepSoftPin       bool     `json:"keep_soft_pin"` // SoftPinAction PRESERVE
}

// putOptions parses a put configuration ("" = defaults).
func putOptions(cfg string) (store.PutOptions, error) {
	var o store.PutOptions
	if cfg == "" {
		return o, nil
	}
	var r putConfigJSON
	if err := json.Unmarshal([]byte(cfg), &r); err != nil {
		return o, errInvalid("replicate config: " + err.Error())
	}
	if r.ReplicaNum < 0 || r.ReplicaNum > 64 {
		return o, errInvalid(fmt.Sprintf("replica_num %d", r.ReplicaNum))
	}
	if r.SoftPinTTLMs < 0 {
		return o, errInvalid(fmt.Sprintf("soft_pin_ttl_ms %d", r.SoftPinTTLMs))
	}
	o.Replicas = r.ReplicaNum
	o.SoftPin = r.SoftPin
	o.SoftPinTTL = time.Duration(r.SoftPinTTLMs) * time.Millisecond
	o.HardPin = r.HardPin
	o.PreferredSegments = r.PreferredSegments
	o.PreferLocal = r.SameNode
	o.Upsert = r.Upsert
	o.KeepSoftPin = r.KeepSoftPin && !r.SoftPin
	return o, nil
}

// put stores value under key with o. Memory inside a registered buffer is
// sent from where it is. A plain put of a key that exists succeeds and
// keeps the old value (Mooncake's behaviour); an upsert replaces it.
func (s *storeState) put(key string, value []byte, o store.PutOptions) error {
	if key == "" {
		return errInvalid("empty key")
	}
	if ok, err := s.devicePut(key, value, o); ok {
		return err
	}
	ctx, cancel := s.ctx(len(value))
	defer cancel()
	var err error
	if len(value) > 0 && s.regs.contains(uint64(transfer.AddrOf(value)), uint64(len(value))) {
		err = s.c.PutFrom(ctx, key, value, o)
	} else {
		err = s.c.PutWith(ctx, key, value, o)
	}
	if !o.Upsert && errors.Is(err, store.ErrExists) {
		return nil
	}
	return err
}

func (s *storeState) get(key string) ([]byte, error) {
	ctx, cancel := s.ctx(0)
	defer cancel()
	return s.c.Get(ctx, key)
}

// directGetMin is the destination size from which getInto registers
// unregistered memory for the read instead of copying into it.
const directGetMin = 64 << 10

// getInto reads key into dst and returns the length. dst inside a
// registered buffer is filled by the transfer engine directly; other memory
// is filled by a copy.
func (s *storeState) getInto(key string, dst []byte) (int, error) {
	if n, ok, err := s.deviceGetInto(key, dst); ok {
		return n, err
	}
	ctx, cancel := s.ctx(len(dst))
	defer cancel()
	if len(dst) > 0 && s.regs.contains(uint64(transfer.AddrOf(dst)), uint64(len(dst))) {
		return s.c.GetInto(ctx, key, dst)
	}
	// Large unregistered memory is registered for the duration of the read
	// (no copy); when that is refused (it overlaps a registration) it is
	// filled by a copy.
	if len(dst) >= directGetMin && s.c.RegisterBuffer(dst) == nil {
		n, err := s.c.GetInto(ctx, key, dst)
		if uerr := s.c.UnregisterBuffer(dst); uerr != nil && err == nil {
			err = uerr
		}
		return n, err
	}
	v, err := s.c.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(v) > len(dst) {
		return 0, fmt.Errorf("get %q: value of %d bytes, buffer of %d: %w", key, len(v), len(dst), store.ErrBufferTooSmall)
	}
	return copy(dst, v), nil
}

// batch runs f for i in [0, n) with bounded parallelism.
func batch(n int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

func (s *storeState) registerBuffer(b []byte) error {
	if len(b) == 0 {
		return errInvalid("empty buffer")
	}
	a := uint64(transfer.AddrOf(b))
	if err := s.regs.add(a, uint64(len(b))); err != nil {
		return err
	}
	if _, dev := deviceOrdinal(a); dev {
		// Device memory: recorded only (store_cuda.go); never the engine's.
		s.mu.Lock()
		s.bufs[a] = nil
		s.mu.Unlock()
		return nil
	}
	if err := s.c.RegisterBuffer(b); err != nil {
		s.regs.remove(a)
		return err
	}
	s.mu.Lock()
	s.bufs[a] = b
	s.mu.Unlock()
	return nil
}

func (s *storeState) unregisterBuffer(a uint64) error {
	s.mu.Lock()
	b, ok := s.bufs[a]
	delete(s.bufs, a)
	s.mu.Unlock()
	if !ok {
		return errInvalid(fmt.Sprintf("0x%x is not a registered buffer", a))
	}
	s.regs.remove(a)
	if b == nil { // device memory (registerBuffer)
		return nil
	}
	return s.c.UnregisterBuffer(b)
}

func (s *storeState) exist(key string) (bool, error) {
	ctx, cancel := s.ctx(0)
	defer cancel()
	return s.c.Exist(ctx, key)
}

func (s *storeState) batchExist(keys []string) ([]bool, error) {
	ctx, cancel := s.ctx(0)
	defer cancel()
	return s.c.BatchExist(ctx, keys)
}

func (s *storeState) size(key string) (int64, error) {
	ctx, cancel := s.ctx(0)
	defer cancel()
	info, err := s.c.Stat(ctx, key)
	if err != nil {
		return 0, err
	}
	return int64(info.Size), nil
}

// replicaJSON is one replica of get_replica_desc.
type replicaJSON struct {
	Segment  string `json:"segment"`
	Endpoint string `json:"endpoint"`
	Addr     uint64 `json:"addr"`
	Size     uint64 `json:"size"`
}

// diskReplicaJSON is one disk-tier copy of get_replica_desc (Mooncake's
// LOCAL_DISK replica).
type diskReplicaJSON struct {
	Segment string `json:"segment"`
	URL     string `json:"url"`
	Seq     uint64 `json:"seq"`
}

// statJSON is what get_replica_desc returns for one key.
type statJSON struct {
	Size     uint64            `json:"size"`
	HardPin  bool              `json:"hard_pin"`
	Replicas []replicaJSON     `json:"replicas"`
	Disk     []diskReplicaJSON `json:"disk"`
}

// stat returns key's size and replicas as JSON.
func (s *storeState) stat(key string) ([]byte, error) {
	ctx, cancel := s.ctx(0)
	defer cancel()
	info, err := s.c.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	out := statJSON{Size: info.Size, HardPin: info.HardPin, Replicas: []replicaJSON{}, Disk: []diskReplicaJSON{}}
	for _, r := range info.Replicas {
		out.Replicas = append(out.Replicas, replicaJSON{Segment: r.Segment, Endpoint: r.Endpoint, Addr: r.Addr, Size: r.Size})
	}
	for _, d := range info.Disk {
		out.Disk = append(out.Disk, diskReplicaJSON{Segment: d.Segment, URL: d.URL, Seq: d.Seq})
	}
	return json.Marshal(out)
}

func (s *storeState) remove(key string, force bool) error {
	ctx, cancel := s.ctx(0)
	defer cancel()
	return s.c.Remove(ctx, key, force)
}

func (s *storeState) removeRegex(pattern string, force bool) (int, error) {
	ctx, cancel := s.ctx(0)
	defer cancel()
	return s.c.RemoveByRegex(ctx, pattern, force)
}

func (s *storeState) removeAll(force bool) (int, error) {
	ctx, cancel := s.ctx(0)
	defer cancel()
	return s.c.RemoveAll(ctx, force)
}

// batchRemove removes keys and returns one error per key.
func (s *storeState) batchRemove(keys []string, force bool) []error {
	ctx, cancel := s.ctx(0)
	defer cancel()
	return s.c.BatchRemove(ctx, keys, force)
}

// list returns every key with the prefix, in key order, as a JSON array.
func (s *storeState) list(prefix string) ([]byte, error) {
	ctx, cancel := s.ctx(0)
	defer cancel()
	keys := []string{}
	after := ""
	for {
		page, next, err := s.c.List(ctx, prefix, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, k := range page {
			keys = append(keys, k.Key)
		}
		if next == "" || len(page) == 0 {
			break
		}
		after = next
	}
	return json.Marshal(keys)
}

// health is one master round trip.
func (s *storeState) health() error {
	ctx, cancel := s.ctx(0)
	defer cancel()
	_, err := s.c.Exist(ctx, "__mooncake_health_check__")
	return err
}

// hostname is the client's "host:port", as in Mooncake its local_hostname
// (also when that port was taken and the engine has another, openStore):
// its transfer engine's name, which is its segment's name.
func (s *storeState) hostname() string {
	if s.eng == nil {
		return s.c.SegmentName() // a dummy client: its real client's name
	}
	return cmp.Or(s.host, s.eng.Name())
}

func storeByHandle(h int64) (*storeState, error) {
	s, ok := stores.get(h)
	if !ok {
		return nil, fmt.Errorf("store %d: %w", h, errBadHandle)
	}
	return s, nil
}
