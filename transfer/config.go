package transfer

import (
	"fmt"

	"github.com/kvcache-go/mooncake/internal/grant"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"time"
)

// Metadata modes.
const (
	MetadataP2P = "P2PHANDSHAKE"
)

// Transport names, as Config.Transport and as Batch.Transport reports them.
const (
	TransportAuto   = "auto"
	TransportTCP    = "tcp"
	TransportShm    = "shm"
	TransportInproc = "inproc"
)

// Config configures an Engine. The zero value (after defaults) is a P2P
// engine on 127.0.0.1 with a random RPC port and automatic transports.
type Config struct {
	LocalHostname string        // "127.0.0.1" default; the segment name is "host:rpcport"
	RPCPort       int           // 0 = pick a free port
	Metadata      string        // "" or "P2PHANDSHAKE" (default), "http://h:p/metadata", "etcd://h:p"
	Transport     string        // "auto" (default), "tcp", "shm", "inproc"
	Secret        string        // optional shared secret presented at handshake
	Checksum      bool          // CRC32C per slice, end to end (TCP)
	Timeout       time.Duration // per-transfer deadline when ctx has none (30s)
	Logger        *slog.Logger  // nil = discard
	// InprocHub is the directory through which engines of this process
	// reach each other with Transport "inproc" (required then: engines that
	// share a hub see each other, there is no process-wide default; make one
	// with NewHub). Other transports ignore it.
	InprocHub *Hub
	// ShmPopulateWhole maps peers' buffers over shared memory whole, with
	// MAP_POPULATE, instead of lazily (the default; see
	// internal/transport/shm). For benchmarks that compare the two.
	ShmPopulateWhole bool

	Lanes     int // TCP bulk lanes per peer (GOMAXPROCS-1, 1..4); one express lane is added
	SliceSize int // TCP requests are cut into slices of this size (256 KiB)
	SmallMax  int // slices up to this size may use the express lane (64 KiB)
	MaxSlice  int // largest slice this engine accepts from a peer (16 MiB)
	MaxFrame  int // largest control frame accepted (1 MiB)
	// HandshakeTimeout bounds dialing a peer and each control exchange (5s).
	HandshakeTimeout time.Duration
	// MaxNotifies bounds the queue of received notifications (4096).
	MaxNotifies int
	// MetadataRefresh is how often an engine with a metadata service checks
	// that its descriptor is still published there and re-publishes it when
	// the service lost it (a restarted metadata server) (5s).
	MetadataRefresh time.Duration
	// LinkRate, when > 0, limits the WRITE payload bytes this engine sends
	// over the TCP transport to that many bytes per second, all peers
	// together: a token bucket of LinkBurst bytes (default 64 KiB) that
	// lanes wait on before each send, as a link of that bandwidth would
	// pace them. For benchmarks of bandwidth-limited links (`mooncake bench
	// pd --link-rate`); shared memory and READ payloads are not limited.
	LinkRate  float64
	LinkBurst int
	// Device, when set, is the GPU driver (*cuda.Driver): device memory may
	// then be registered and moved like host memory (see device.go).
	// StageChunk and StageBuffers shape the pinned staging of device memory
	// that crosses a host transport: chunks of StageChunk bytes (1 MiB)
	// through StageBuffers buffers (3) per transfer in flight.
	Device       Device
	StageChunk   int
	StageBuffers int
	// Grants, when set, makes this engine's memory capability-checked:
	// every incoming READ and WRITE must lie inside a grant (package
	// internal/grant) for this segment, of the right mode, installed on the
	// connection that carries it, signed with one of the verifier's keys
	// and still valid; others fail at the initiator with ErrDenied and
	// touch nothing. Shared memory is then not offered to peers (a peer
	// that mapped a memfd could touch all of it): they use TCP. Not with
	// Transport "inproc". See grants.go.
	Grants *grant.Verifier

	// noVectored makes the engine treat every peer as one whose lanes
	// serve no scatter-gather requests (tests of the plain fallback).
	noVectored bool
}

func (c Config) withDefaults() Config {
	if c.LocalHostname == "" {
		c.LocalHostname = "127.0.0.1"
	}
	if c.Metadata == "" {
		c.Metadata = MetadataP2P
	}
	if c.Transport == "" {
		c.Transport = TransportAuto
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Lanes == 0 {
		// As many bulk lanes as streams may run at once (see the bulk
		// tokens in internal/transport/tcp): GOMAXPROCS-1, 1..4.
		c.Lanes = min(max(runtime.GOMAXPROCS(0)-1, 1), 4)
	}
	if c.SliceSize == 0 {
		c.SliceSize = 256 << 10
	}
	if c.SmallMax == 0 {
		c.SmallMax = 64 << 10
	}
	if c.MaxSlice == 0 {
		c.MaxSlice = 16 << 20
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = 1 << 20
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 5 * time.Second
	}
	if c.MaxNotifies == 0 {
		c.MaxNotifies = 4096
	}
	if c.MetadataRefresh == 0 {
		c.MetadataRefresh = 5 * time.Second
	}
	if c.LinkBurst == 0 {
		c.LinkBurst = 64 << 10
	}
	if c.StageChunk == 0 {
		c.StageChunk = DefaultStageChunk
	}
	if c.StageBuffers == 0 {
		c.StageBuffers = DefaultStageBuffers
	}
	return c
}

// Validate checks the configuration (after defaults are applied).
func (c Config) Validate() error {
	c = c.withDefaults()
	if strings.ContainsAny(c.LocalHostname, " /") {
		return fmt.Errorf("transfer: config: bad local hostname %q", c.LocalHostname)
	}
	if _, _, err := net.SplitHostPort(c.LocalHostname); err == nil {
		return fmt.Errorf("transfer: config: local hostname %q contains a port: put the port in RPCPort", c.LocalHostname)
	}
	if c.RPCPort < 0 || c.RPCPort > 65535 {
		return fmt.Errorf("transfer: config: rpc port %d out of range", c.RPCPort)
	}
	switch {
	case c.Metadata == MetadataP2P:
	case strings.HasPrefix(c.Metadata, "http://"):
	case strings.HasPrefix(c.Metadata, "etcd://"):
	default:
		return fmt.Errorf("transfer: config: metadata %q: want P2PHANDSHAKE, http://h:p/metadata or etcd://h:p", c.Metadata)
	}
	switch c.Transport {
	case TransportAuto, TransportTCP, TransportShm:
	case TransportInproc:
		if c.Grants != nil {
			return fmt.Errorf("transfer: config: transport inproc does not check grants")
		}
		if c.InprocHub == nil {
			return fmt.Errorf("transfer: config: transport inproc needs an InprocHub (NewHub) shared by the engines that reach each other")
		}
	default:
		return fmt.Errorf("transfer: config: transport %q: want auto, tcp, shm or inproc", c.Transport)
	}
	if c.Timeout < 0 || c.HandshakeTimeout < 0 || c.MetadataRefresh < 0 {
		return fmt.Errorf("transfer: config: negative timeout")
	}
	if c.Lanes < 1 || c.Lanes > 64 {
		return fmt.Errorf("transfer: config: lanes %d: want 1..64", c.Lanes)
	}
	if c.SliceSize < 4096 || c.SliceSize > c.MaxSlice {
		return fmt.Errorf("transfer: config: slice size %d: want 4096..MaxSlice(%d)", c.SliceSize, c.MaxSlice)
	}
	if c.LinkRate < 0 || c.LinkRate != c.LinkRate || c.LinkBurst < 1 {
		return fmt.Errorf("transfer: config: link rate %v bytes/s, burst %d: want rate >= 0 and burst >= 1", c.LinkRate, c.LinkBurst)
	}
	if c.StageChunk < 4096 || c.StageBuffers < 1 {
		return fmt.Errorf("transfer: config: stage chunk %d, buffers %d: want >= 4096 and >= 1", c.StageChunk, c.StageBuffers)
	}
	if c.SmallMax < 0 || c.MaxFrame < 4096 || c.MaxNotifies < 1 {
		return fmt.Errorf("transfer: config: bad limits")
	}
	return nil
}

// hostPort joins the local hostname with a port.
func (c Config) hostPort(port int) string {
	return net.JoinHostPort(c.LocalHostname, fmt.Sprint(port))
}
