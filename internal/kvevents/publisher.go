package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-zeromq/zmq4"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/kvcache"
)

// ErrConfig wraps config errors.
var ErrConfig = errors.New("kvevents: invalid config")

// endSeq is the replay end marker: -1 as 8 bytes big-endian.
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Config configures a Publisher.
type Config struct {
	// Endpoint is where the PUB socket binds ("tcp://127.0.0.1:5557";
	// port 0 picks one, see Endpoints).
	Endpoint string
	// ReplayEndpoint is where the ROUTER replay socket binds ("" none).
	ReplayEndpoint string
	// Topic is the first frame of every message ("").
	Topic string
	// BufferSteps is how many past batches replay can send (10000).
	BufferSteps int
	// MaxQueue bounds batches waiting to be sent (100000); Publish drops
	// beyond it.
	MaxQueue int
	// DPRank is the batches' data_parallel_rank (0).
	DPRank int
	// MapEncoding writes the newer (map) encoding; false the array one.
	MapEncoding bool
	// MillisTS writes each batch's timestamp as integer milliseconds
	// (Mooncake's store master) instead of float seconds.
	MillisTS bool
	// BlockSize is the engine's block size, for BlockStored (16).
	BlockSize int
	// Clock stamps batches (ts, seconds).
	Clock  clock.Clock
	Logger *slog.Logger
}

// Publisher publishes KV events; see the package doc.
type Publisher struct {
	cfg     Config
	queue   chan Batch
	dropped atomic.Uint64
	sent    atomic.Uint64

	ready    chan struct{}
	mu       sync.Mutex
	pubAddr  string
	replAddr string
	buf      []buffered // ring of the last BufferSteps batches
}

type buffered struct {
	seq     uint64
	payload []byte
}

// NewPublisher checks cfg; it binds nothing (Run does).
func NewPublisher(cfg Config) (*Publisher, error) {
	if !strings.HasPrefix(cfg.Endpoint, "tcp://") {
		return nil, fmt.Errorf("%w: endpoint %q (want tcp://HOST:PORT)", ErrConfig, cfg.Endpoint)
	}
	if cfg.ReplayEndpoint != "" && !strings.HasPrefix(cfg.ReplayEndpoint, "tcp://") {
		return nil, fmt.Errorf("%w: replay endpoint %q (want tcp://HOST:PORT)", ErrConfig, cfg.ReplayEndpoint)
	}
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = 10000
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 100000
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{cfg: cfg, queue: make(chan Batch, cfg.MaxQueue), ready: make(chan struct{})}, nil
}

// Publish queues events as one batch; it never blocks.
func (p *Publisher) Publish(events ...Event) {
	dp := p.cfg.DPRank
	b := Batch{TS: float64(p.cfg.Clock.Now().UnixNano()) / 1e9, Events: events, DPRank: &dp, MillisTS: p.cfg.MillisTS}
	select {
	case p.queue <- b:
	default:
		p.dropped.Add(1)
	}
}

// Dropped is how many batches Publish dropped on a full queue.
func (p *Publisher) Dropped() uint64 { return p.dropped.Load() }

// Sent is how many batches were sent (the next sequence number).
func (p *Publisher) Sent() uint64 { return p.sent.Load() }

// Ready is closed once Run has bound its sockets.
func (p *Publisher) Ready() <-chan struct{} { return p.ready }

// Endpoints are the bound addresses (tcp://host:port), after Ready.
func (p *Publisher) Endpoints() (pub, replay string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pubAddr, p.replAddr
}

// BlockStored implements engine.KVEvents: blocks (with their parent, nil
// for a sequence's first) hold tokens.
func (p *Publisher) BlockStored(hashes []kvcache.BlockHash, parent *kvcache.BlockHash, tokens []int) {
	e := BlockStored{BlockHashes: make([]Hash, len(hashes)), TokenIDs: append([]int(nil), tokens...),
		BlockSize: p.cfg.BlockSize, Medium: MediumGPU}
	for i, h := range hashes {
		e.BlockHashes[i] = BytesHash(h[:])
	}
	if parent != nil {
		ph := BytesHash(parent[:])
		e.ParentBlockHash = &ph
	}
	p.Publish(e)
}

// BlockRemoved implements engine.KVEvents.
func (p *Publisher) BlockRemoved(hashes []kvcache.BlockHash) {
	e := BlockRemoved{BlockHashes: make([]Hash, len(hashes)), Medium: MediumGPU}
	for i, h := range hashes {
		e.BlockHashes[i] = BytesHash(h[:])
	}
	p.Publish(e)
}

// ObjectStored publishes a store object's arrival in a tier as a
// BlockStored whose one hash is the object key's bytes and whose medium is
// the tier ("CPU" memory, "DISK"): the store master's KV events (Mooncake's
// enable_kv_events), in the format the engines use. The store does not know
// an object's tokens, so TokenIDs is empty.
func (p *Publisher) ObjectStored(key, medium string) {
	p.Publish(BlockStored{BlockHashes: []Hash{BytesHash([]byte(key))}, TokenIDs: []int{}, BlockSize: p.cfg.BlockSize, Medium: medium})
}

// ObjectRemoved publishes that a store object left a tier.
func (p *Publisher) ObjectRemoved(key, medium string) {
	p.Publish(BlockRemoved{BlockHashes: []Hash{BytesHash([]byte(key))}, Medium: medium})
}

// AllBlocksCleared implements engine.KVEvents.
func (p *Publisher) AllBlocksCleared() { p.Publish(AllBlocksCleared{}) }

// ZMQWriterLeak is the function of a goroutine go-zeromq/zmq4 (v0.17) may
// leave behind when a PUB socket closes while it was sending (its writer
// waits on a condition nobody signals again). Tests that check for leaked
// goroutines ignore it: goleak.IgnoreAnyFunction(kvevents.ZMQWriterLeak).
const ZMQWriterLeak = "github.com/go-zeromq/zmq4.(*pubMWriter).run"

// ZMQReaderLeaks are the functions of the goroutines go-zeromq/zmq4 (v0.17)
// leaves reading a connection whose handshake completed while its socket
// was closing: Close closes the connections the socket has at that moment,
// and one added after is never closed, so its reader (on the PUB side and
// on the SUB side that dialed it) waits on a connection both ends keep
// open. It happens only when a socket closes as a peer (re)connects; tests
// that check for leaked goroutines ignore these too (ZMQLeakFuncs).
var ZMQReaderLeaks = []string{
	"github.com/go-zeromq/zmq4.(*pubQReader).listen",
	"github.com/go-zeromq/zmq4.(*qreader).listen",
}

// ZMQLeakFuncs lists every function of ZMQWriterLeak and ZMQReaderLeaks,
// for goleak.IgnoreAnyFunction.
func ZMQLeakFuncs() []string { return append([]string{ZMQWriterLeak}, ZMQReaderLeaks...) }

// Run binds the sockets and sends queued batches until ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen(p.cfg.Endpoint); err != nil {
		return fmt.Errorf("kvevents: bind %s: %w", p.cfg.Endpoint, err)
	}
	var router zmq4.Socket
	if p.cfg.ReplayEndpoint != "" {
		router = zmq4.NewRouter(ctx)
		defer router.Close()
		if err := router.Listen(p.cfg.ReplayEndpoint); err != nil {
			return fmt.Errorf("kvevents: bind %s: %w", p.cfg.ReplayEndpoint, err)
		}
	}
	p.mu.Lock()
	p.pubAddr = "tcp://" + pub.Addr().String()
	if router != nil {
		p.replAddr = "tcp://" + router.Addr().String()
	}
	p.mu.Unlock()
	close(p.ready)
	var wg sync.WaitGroup
	if router != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.serveReplay(ctx, router)
		}()
	}
	defer wg.Wait()
	defer cancel()
	topic := []byte(p.cfg.Topic)
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-p.queue:
			payload, err := Encode(b, p.cfg.MapEncoding)
			if err != nil {
				p.cfg.Logger.Warn("kv event not encoded", "err", err)
				continue
			}
			seq := p.sent.Load()
			p.mu.Lock()
			if len(p.buf) >= p.cfg.BufferSteps {
				p.buf = p.buf[1:]
			}
			p.buf = append(p.buf, buffered{seq: seq, payload: payload})
			p.mu.Unlock()
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], seq)
			p.sent.Add(1)
			if err := pub.SendMulti(zmq4.NewMsgFrom(topic, sb[:], payload)); err != nil && ctx.Err() == nil {
				p.cfg.Logger.Debug("kv event send", "err", err)
			}
		}
	}
}

// serveReplay answers replay requests: [identity, "", start seq].
func (p *Publisher) serveReplay(ctx context.Context, router zmq4.Socket) {
	for ctx.Err() == nil {
		msg, err := router.Recv()
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Logger.Debug("kv event replay recv", "err", err)
			}
			return
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			p.cfg.Logger.Warn("invalid kv event replay request", "frames", len(msg.Frames))
			continue
		}
		id, start := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		p.mu.Lock()
		var out []buffered
		for _, b := range p.buf {
			if b.seq >= start {
				out = append(out, b)
			}
		}
		p.mu.Unlock()
		for _, b := range out {
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], b.seq)
			if err := router.SendMulti(zmq4.NewMsgFrom(id, nil, sb[:], b.payload)); err != nil {
				break
			}
		}
		router.SendMulti(zmq4.NewMsgFrom(id, nil, endSeq, nil))
	}
}
