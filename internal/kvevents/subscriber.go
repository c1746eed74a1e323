package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Sink receives an instance's batches in sequence order (Index is one).
type Sink interface {
	Apply(instance string, b Batch)
	Clear(instance string)
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Instance names the publisher's instance in the Sink.
	Instance string
	// Endpoint is the publisher's PUB address (tcp://host:port); required.
	Endpoint string
	// ReplayEndpoint is its ROUTER replay address ("" none).
	ReplayEndpoint string
	// Topic is the subscription prefix ("" everything).
	Topic string
	// ReplayTimeout bounds one replay (2s).
	ReplayTimeout time.Duration
	Sink          Sink
	Logger        *slog.Logger
}

// SubStats counts what a subscriber saw.
type SubStats struct {
	Applied  uint64 // batches handed to the sink
	Gaps     uint64 // sequence gaps detected
	Replayed uint64 // batches recovered through replay
	Dropped  uint64 // duplicates or late batches dropped
	Bad      uint64 // messages that did not decode
	Restarts uint64 // the publisher started over at sequence 0
}

// Subscriber follows one publisher; see the package doc.
type Subscriber struct {
	cfg SubscriberConfig

	mu    sync.Mutex
	next  uint64 // next sequence expected
	seen  bool   // a batch was applied
	stats SubStats
}

// NewSubscriber checks cfg; it connects nothing (Run does).
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Endpoint == "" || cfg.Sink == nil {
		return nil, fmt.Errorf("%w: a subscriber needs an endpoint and a sink", ErrConfig)
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Subscriber{cfg: cfg}, nil
}

// Stats returns a snapshot.
func (s *Subscriber) Stats() SubStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Run connects and applies batches until ctx ends (it returns nil then).
func (s *Subscriber) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := zmq4.NewSub(ctx, zmq4.WithAutomaticReconnect(true), zmq4.WithDialerRetry(100*time.Millisecond))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		return err
	}
	for {
		err := sub.Dial(s.cfg.Endpoint)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	for {
		msg, err := sub.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kvevents: %s: %w", s.cfg.Endpoint, err)
		}
		s.Handle(ctx, msg.Frames)
	}
}

// Handle processes one PUB message (topic, sequence, payload): in order it
// is applied; after a gap the missing batches are replayed first; a
// duplicate or late one is dropped. Exported for tests.
func (s *Subscriber) Handle(ctx context.Context, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		s.count(func(st *SubStats) { st.Bad++ })
		return
	}
	seq := binary.BigEndian.Uint64(frames[1])
	s.mu.Lock()
	next, seen := s.next, s.seen
	s.mu.Unlock()
	switch {
	case seen && seq == 0 && next > 0:
		// The publisher restarted (a new engine process counts from 0):
		// what we knew of the instance is gone with it.
		s.cfg.Sink.Clear(s.cfg.Instance)
		s.mu.Lock()
		s.seen, s.next = false, 0
		s.stats.Restarts++
		s.mu.Unlock()
	case seen && seq < next:
		s.count(func(st *SubStats) { st.Dropped++ })
		return
	case seq > next || (!seen && seq > 0):
		// A gap (or we joined late): recover what we missed.
		s.count(func(st *SubStats) { st.Gaps++ })
		if !s.replay(ctx, next, seq) {
			s.cfg.Logger.Warn("kv events lost and not replayed: forgetting the instance's cache", "instance", s.cfg.Instance, "from", next, "to", seq)
			s.cfg.Sink.Clear(s.cfg.Instance)
		}
	}
	s.apply(seq, frames[2], false)
}

func (s *Subscriber) apply(seq uint64, payload []byte, replayed bool) {
	b, err := Decode(payload)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen && seq < s.next {
		s.stats.Dropped++
		return
	}
	s.next, s.seen = seq+1, true
	if err != nil {
		s.stats.Bad++
		return
	}
	s.stats.Applied++
	if replayed {
		s.stats.Replayed++
	}
	s.cfg.Sink.Apply(s.cfg.Instance, b)
}

func (s *Subscriber) count(f func(*SubStats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// replay asks for batches [from, upto) and applies them; it reports
// whether every missing batch came.
func (s *Subscriber) replay(ctx context.Context, from, upto uint64) bool {
	if s.cfg.ReplayEndpoint == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithDialerTimeout(s.cfg.ReplayTimeout))
	defer d.Close()
	if err := d.Dial(s.cfg.ReplayEndpoint); err != nil {
		s.cfg.Logger.Warn("kv event replay dial", "err", err)
		return false
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], from)
	if err := d.SendMulti(zmq4.NewMsgFrom(nil, start[:])); err != nil {
		return false
	}
	got := from
	for {
		msg, err := d.Recv()
		if err != nil {
			return false
		}
		f := msg.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:] // the empty delimiter
		}
		if len(f) != 2 || len(f[0]) != 8 {
			continue
		}
		if string(f[0]) == string(endSeq) {
			return got >= upto
		}
		seq := binary.BigEndian.Uint64(f[0])
		if seq >= upto {
			continue // the live message carries it
		}
		if seq != got {
			return false // the buffer no longer holds what we missed
		}
		s.apply(seq, f[1], true)
		got = seq + 1
	}
}
