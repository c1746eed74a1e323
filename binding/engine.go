package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/transfer"
)

func init() {
	codeTable = append(codeTable,
		codeMapping{transfer.ErrUnknownSegment, codeSegmentNotFound},
		codeMapping{transfer.ErrTimeout, codeRPCTimeout},
		codeMapping{transfer.ErrNotRegistered, codeInvalidParams},
		codeMapping{transfer.ErrInvalid, codeInvalidParams},
		codeMapping{transfer.ErrOutOfBounds, codeTransferFail},
		codeMapping{transfer.ErrPeerDown, codeTransferFail},
		codeMapping{transfer.ErrChecksum, codeTransferFail},
		codeMapping{transfer.ErrCanceled, codeTransferFail},
		codeMapping{transfer.ErrAuth, codeRPCFail},
		codeMapping{transfer.ErrClosed, codeInternal},
	)
}

// engines holds every open engine by handle.
var engines = newHandles[*engineState]()

// engineState is one open transfer engine plus what the binding tracks for
// it: the local ranges callers may use, managed buffers, async batches.
type engineState struct {
	e       *transfer.Engine
	timeout time.Duration // base per-transfer deadline (plus 1ns per byte)
	regs    regions

	mu      sync.Mutex
	managed map[uint64][]byte
	batches map[int64]*asyncBatch
	nextID  int64
}

// asyncBatch is a submitted batch, owned by the binding until it is waited
// for or reports a final state.
type asyncBatch struct {
	b        *transfer.Batch
	n        int
	cancel   context.CancelFunc
	deadline time.Time
}

// inprocHub is this process's directory for the "inproc" protocol: the
// binding is the process's one API, so its engines all reach each other.
var inprocHub = transfer.NewHub()

// engineArgs turns Mooncake's initialize arguments into a transfer.Config.
// Warnings name arguments that were accepted but changed.
func engineArgs(host, metadata, protocol, device string) (transfer.Config, []string, error) {
	var cfg transfer.Config
	var warns []string
	host = strings.TrimSpace(host)
	if host == "" {
		host = "127.0.0.1"
	}
	if h, p, err := net.SplitHostPort(host); err == nil {
		port, perr := strconv.Atoi(p)
		if perr != nil || port < 0 || port > 65535 {
			return cfg, nil, errInvalid(fmt.Sprintf("local_hostname %q: bad port", host))
		}
		host, cfg.RPCPort = h, port
	}
	cfg.LocalHostname = host
	meta, err := metadataURI(metadata)
	if err != nil {
		return cfg, nil, err
	}
	cfg.Metadata = meta
	switch p := strings.ToLower(strings.TrimSpace(protocol)); p {
	case "", transfer.TransportTCP:
		cfg.Transport = transfer.TransportTCP
	case transfer.TransportAuto, transfer.TransportShm, transfer.TransportInproc:
		cfg.Transport = p
		if p == transfer.TransportInproc {
			cfg.InprocHub = inprocHub
		}
	case "rdma", "efa", "nvlink", "nvlink_intra", "hip", "cxl", "ascend", "barex", "nvmeof":
		if forceHCA() {
			return cfg, nil, errInvalid(fmt.Sprintf("protocol %q: no RDMA device on this host and MC_FORCE_HCA is set", p))
		}
		cfg.Transport = transfer.TransportTCP
		warns = append(warns, fmt.Sprintf("protocol %q is not available here; using tcp", p))
	default:
		return cfg, nil, errInvalid(fmt.Sprintf("protocol %q: want tcp, shm, auto or inproc", p))
	}
	if device != "" {
		warns = append(warns, fmt.Sprintf("device filter %q ignored (no RDMA devices)", device))
	}
	cfg.Timeout = transferTimeout(os.Getenv("MC_TRANSFER_TIMEOUT"))
	if d := gpuDriver(); d != nil {
		cfg.Device = d // device memory is registered and moved like host memory
	}
	return cfg, warns, cfg.Validate()
}

// metadataURI turns Mooncake's metadata_server argument into the transfer
// engine's form: "" or P2PHANDSHAKE (any case) is the P2P handshake;
// http://h:p/path is the HTTP metadata service; etcd://h:p[,h:p...] and a
// bare h:p[,h:p...] are etcd (Mooncake's default scheme), with ';' accepted
// as a separator as in Mooncake's etcd lists. The scheme is case-insensitive.
// redis://, https:// and other schemes are refused with the reason.
func metadataURI(metadata string) (string, error) {
	m := strings.TrimSpace(metadata)
	if m == "" || strings.EqualFold(m, transfer.MetadataP2P) {
		return transfer.MetadataP2P, nil
	}
	scheme, rest, ok := strings.Cut(m, "://")
	if !ok {
		scheme, rest = "etcd", m // bare host:port means etcd, as in Mooncake
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "http":
		host, _, _ := strings.Cut(rest, "/")
		if host == "" {
			return "", errInvalid(fmt.Sprintf("metadata server %q: no host", m))
		}
		return "http://" + rest, nil
	case "etcd":
		var eps []string
		for _, ep := range strings.FieldsFunc(rest, func(r rune) bool { return r == ',' || r == ';' }) {
			if ep = strings.TrimSpace(ep); ep != "" {
				eps = append(eps, ep)
			}
		}
		if len(eps) == 0 || strings.Contains(rest, "/") {
			return "", errInvalid(fmt.Sprintf("metadata server %q: want etcd://host:port[,host:port...]", m))
		}
		return "etcd://" + strings.Join(eps, ","), nil
	default:
		return "", errInvalid(fmt.Sprintf("metadata server %q: scheme %q is not supported; want P2PHANDSHAKE, http://h:p/metadata, etcd://h:p or h:p", m, scheme))
	}
}

// transferTimeout parses MC_TRANSFER_TIMEOUT (seconds; default 30, min 5).
func transferTimeout(s string) time.Duration {
	secs, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || secs <= 0 {
		return 30 * time.Second
	}
	return time.Duration(max(secs, 5)) * time.Second
}

func openEngine(ctx context.Context, cfg transfer.Config) (*engineState, error) {
	cfg.Logger = logger.With("engine", cfg.LocalHostname)
	e, err := transfer.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &engineState{e: e, timeout: cfg.Timeout, managed: map[uint64][]byte{}, batches: map[int64]*asyncBatch{}}, nil
}

func (s *engineState) close() error {
	s.mu.Lock()
	bs := s.batches
	s.batches = map[int64]*asyncBatch{}
	s.mu.Unlock()
	for _, b := range bs {
		b.release()
	}
	return s.e.Close()
}

func (s *engineState) register(addr, length uint64, location string) error {
	if location == "" {
		location = "*"
	}
	if err := s.regs.add(addr, length); err != nil {
		return err
	}
	if err := s.e.Register(uintptr(addr), int(length), location); err != nil {
		s.regs.remove(addr)
		return err
	}
	return nil
}

func (s *engineState) unregister(addr uint64) error {
	if err := s.e.Unregister(uintptr(addr)); err != nil {
		return err
	}
	s.regs.remove(addr)
	return nil
}

func (s *engineState) allocManaged(n uint64) (uint64, error) {
	if n == 0 || n > 1<<40 {
		return 0, errInvalid(fmt.Sprintf("managed buffer length %d", n))
	}
	b, err := s.e.AllocateManaged(int(n))
	if err != nil {
		return 0, err
	}
	addr := uint64(transfer.AddrOf(b))
	if err := s.regs.add(addr, uint64(len(b))); err != nil {
		_ = s.e.FreeManaged(b)
		return 0, err
	}
	s.mu.Lock()
	s.managed[addr] = b
	s.mu.Unlock()
	return addr, nil
}

func (s *engineState) freeManaged(addr uint64) error {
	s.mu.Lock()
	b, ok := s.managed[addr]
	delete(s.managed, addr)
	s.mu.Unlock()
	if !ok {
		return errInvalid(fmt.Sprintf("0x%x is not a managed buffer", addr))
	}
	s.regs.remove(addr)
	return s.e.FreeManaged(b)
}

// requests validates a batch and opens the target segment.
func (s *engineState) requests(ctx context.Context, target string, op int64, locals, remotes, lens []uint64) ([]transfer.Request, uint64, error) {
	if op != int64(transfer.OpRead) && op != int64(transfer.OpWrite) {
		return nil, 0, errInvalid(fmt.Sprintf("opcode %d", op))
	}
	n := len(locals)
	if n == 0 || len(remotes) != n || len(lens) != n {
		return nil, 0, errInvalid("empty batch or lists of different lengths")
	}
	var total uint64
	for i := range n {
		if !s.regs.contains(locals[i], lens[i]) {
			return nil, 0, fmt.Errorf("request %d: [0x%x,+%d): %w", i, locals[i], lens[i], errNotRegistered)
		}
		total += lens[i]
	}
	if target == "" {
		return nil, 0, errInvalid("empty target session id")
	}
	seg, err := s.e.OpenSegment(ctx, target)
	if err != nil {
		return nil, 0, err
	}
	reqs := make([]transfer.Request, n)
	for i := range n {
		reqs[i] = transfer.Request{Op: transfer.Opcode(op), Local: uintptr(locals[i]), Segment: seg, Remote: remotes[i], Length: int(lens[i])}
	}
	return reqs, total, nil
}

// deadlineFor is Mooncake's transfer deadline: the base timeout plus 1ns per byte.
func (s *engineState) deadlineFor(total uint64) time.Duration {
	return s.timeout + time.Duration(min(total, 1<<50))
}

func (s *engineState) transfer(target string, op int64, locals, remotes, lens []uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	reqs, total, err := s.requests(ctx, target, op, locals, remotes, lens)
	if err != nil {
		return err
	}
	tctx, tcancel := context.WithTimeout(context.Background(), s.deadlineFor(total))
	defer tcancel()
	return s.e.Transfer(tctx, reqs)
}

func (s *engineState) submit(target string, op int64, locals, remotes, lens []uint64) (int64, error) {
	octx, ocancel := context.WithTimeout(context.Background(), s.timeout)
	reqs, total, err := s.requests(octx, target, op, locals, remotes, lens)
	ocancel()
	if err != nil {
		return 0, err
	}
	d := s.deadlineFor(total)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	b, err := s.e.Submit(ctx, reqs)
	if err != nil {
		cancel()
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.batches[s.nextID] = &asyncBatch{b: b, n: len(reqs), cancel: cancel, deadline: time.Now().Add(d)}
	return s.nextID, nil
}

func (b *asyncBatch) release() {
	b.cancel()
	b.b.Free()
}

func (s *engineState) take(id int64) (*asyncBatch, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batches[id]
	delete(s.batches, id)
	return b, ok
}

// wait waits for every batch in ids and frees them; the first failure is returned.
func (s *engineState) wait(ids []int64) error {
	var errs []error
	for _, id := range ids {
		b, ok := s.take(id)
		if !ok {
			errs = append(errs, fmt.Errorf("batch %d: %w", id, errBadHandle))
			continue
		}
		ctx, cancel := context.WithDeadline(context.Background(), b.deadline)
		err := b.b.Wait(ctx)
		cancel()
		b.release()
		if err != nil {
			errs = append(errs, fmt.Errorf("batch %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// check reports a batch's state without blocking: 1 done, 0 running,
// -1 failed, -2 timed out. Final states free the batch.
func (s *engineState) check(id int64, now time.Time) (int64, error) {
	s.mu.Lock()
	b, ok := s.batches[id]
	s.mu.Unlock()
	if !ok {
		return codeCheckFailed, fmt.Errorf("batch %d: %w", id, errBadHandle)
	}
	rc, err := batchState(b, now)
	if rc != codeCheckStillActive {
		if _, ok := s.take(id); ok {
			b.release()
		}
	}
	return rc, err
}

func batchState(b *asyncBatch, now time.Time) (int64, error) {
	select {
	case <-b.b.Done():
	default:
		if now.After(b.deadline) {
			// The engine aborts at the deadline; until it has, report the timeout.
			return codeCheckTimeout, fmt.Errorf("batch unfinished at its deadline: %w", transfer.ErrTimeout)
		}
		return codeCheckStillActive, nil
	}
	for i := range b.n {
		err := b.b.Err(i)
		if err == nil && b.b.Status(i) != transfer.StatusCompleted {
			err = fmt.Errorf("status %s", b.b.Status(i))
		}
		if err == nil {
			continue
		}
		if errors.Is(err, transfer.ErrTimeout) || b.b.Status(i) == transfer.StatusTimeout {
			return codeCheckTimeout, fmt.Errorf("task %d: %w", i, err)
		}
		return codeCheckFailed, fmt.Errorf("task %d: %w", i, err)
	}
	return codeCheckCompleted, nil
}

func (s *engineState) probe(peer string) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	return s.e.Probe(ctx, peer)
}

func (s *engineState) firstBuffer(segment string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	d, err := s.e.Segment(ctx, segment)
	if err != nil {
		return 0, err
	}
	if len(d.Buffers) == 0 {
		return 0, fmt.Errorf("segment %q has no registered buffers: %w", segment, transfer.ErrUnknownSegment)
	}
	return d.Buffers[0].Addr, nil
}

func (s *engineState) notify(peer, name string, msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	return s.e.Notify(ctx, peer, name, msg)
}

type notifyJSON struct {
	From string `json:"from"`
	Name string `json:"name"`
	Msg  string `json:"msg"`
}

func (s *engineState) notifiesJSON() ([]byte, error) {
	ns := s.e.Notifies()
	out := make([]notifyJSON, len(ns))
	for i, n := range ns {
		out[i] = notifyJSON{From: n.From, Name: n.Name, Msg: string(n.Msg)}
	}
	return json.Marshal(out)
}

func (s *engineState) topologyJSON() ([]byte, error) {
	type buf struct {
		Addr     uint64 `json:"addr"`
		Length   uint64 `json:"length"`
		Location string `json:"location"`
	}
	bs := s.e.Buffers()
	out := struct {
		Name    string `json:"name"`
		RPCPort int    `json:"rpc_port"`
		Buffers []buf  `json:"buffers"`
	}{Name: s.e.Name(), RPCPort: s.e.RPCPort(), Buffers: make([]buf, len(bs))}
	for i, b := range bs {
		out.Buffers[i] = buf{b.Addr, b.Length, b.Location}
	}
	return json.Marshal(out)
}

func engineByHandle(h int64) (*engineState, error) {
	s, ok := engines.get(h)
	if !ok {
		return nil, fmt.Errorf("engine %d: %w", h, errBadHandle)
	}
	return s, nil
}
