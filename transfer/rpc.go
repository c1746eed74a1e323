package transfer

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/transport/tcp"
	"github.com/kvcache-go/mooncake/internal/wire"
)

func (e *Engine) acceptLoop() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			if e.closed.Load() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			e.log.Warn("transfer: accept", "err", err)
			select {
			case <-e.done:
				return
			case <-time.After(10 * time.Millisecond): // back off on EMFILE and the like
			}
			continue
		}
		e.connMu.Lock()
		if e.closed.Load() {
			e.connMu.Unlock()
			_ = c.Close()
			return
		}
		e.conns[c] = struct{}{}
		e.wg.Add(1)
		e.connMu.Unlock()
		go e.serveConn(c)
	}
}

func (e *Engine) serveConn(c net.Conn) {
	defer e.wg.Done()
	defer func() {
		e.connMu.Lock()
		delete(e.conns, c)
		e.connMu.Unlock()
		_ = c.Close()
	}()
	_ = c.SetDeadline(time.Now().Add(e.cfg.HandshakeTimeout))
	br := bufio.NewReaderSize(c, 64<<10)
	typ, body, err := wire.ReadFrame(br, e.cfg.MaxFrame)
	if err != nil {
		e.log.Debug("transfer: bad control frame", "remote", c.RemoteAddr(), "err", err)
		return
	}
	req, err := wire.DecodeControl(body)
	if err != nil {
		e.reply(c, typ, wire.Control{Error: err.Error(), Code: "bad_request"})
		return
	}
	if !e.checkAuth(req.Auth) {
		e.log.Warn("transfer: peer failed authentication", "remote", c.RemoteAddr())
		e.reply(c, typ, wire.Control{Error: "authentication failed", Code: "auth"})
		return
	}
	switch typ {
	case wire.FrameConnection, wire.FrameMetadata:
		d := e.descriptor()
		e.reply(c, typ, wire.Control{OK: true, Segment: &d})
	case wire.FrameNotify:
		if req.Notify == nil {
			e.reply(c, typ, wire.Control{Error: "notify frame without notify", Code: "bad_request"})
			return
		}
		if err := e.deliver(Notification{From: req.Notify.From, Name: req.Notify.Name, Msg: req.Notify.Msg}); err != nil {
			e.reply(c, typ, wire.Control{Error: err.Error(), Code: "full"})
			return
		}
		e.reply(c, typ, wire.Control{OK: true})
	case wire.FrameProbe:
		e.reply(c, typ, wire.Control{OK: true})
	case wire.FrameLane:
		if req.Lane == nil {
			e.reply(c, typ, wire.Control{Error: "lane frame without lane", Code: "bad_request"})
			return
		}
		if err := e.reply(c, typ, wire.Control{OK: true, MaxSlice: uint64(e.cfg.MaxSlice), Vectored: true}); err != nil {
			return
		}
		_ = c.SetDeadline(time.Time{})
		in := e.laneIn(c, req.Lane.From)
		defer e.laneOut(c, in)
		if err := tcp.ServeLane(c, br, e.laneMemory(), tcp.ServerConfig{MaxSlice: uint64(e.cfg.MaxSlice),
			Bulk: e.bulk, BulkMin: uint64(e.cfg.SmallMax), Express: req.Lane.Index == 0,
			Grants: e.cfg.Grants, Segment: e.name}); err != nil && !e.closed.Load() {
			e.log.Debug("transfer: lane ended", "remote", c.RemoteAddr(), "err", err)
		}
	}
}

func (e *Engine) reply(c net.Conn, typ byte, rep wire.Control) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return wire.WriteFrame(c, typ, b)
}

func (e *Engine) checkAuth(a *wire.Auth) bool {
	if e.cfg.Secret == "" {
		return true
	}
	if a == nil || len(a.Nonce) < 16 {
		return false
	}
	m := hmac.New(sha256.New, []byte(e.cfg.Secret))
	m.Write(a.Nonce)
	if !hmac.Equal(m.Sum(nil), a.MAC) {
		return false
	}
	// Only a proof we have not seen, made recently, is accepted: a recorded
	// handshake cannot be replayed.
	return e.replay.fresh(a.Nonce)
}

// auth proves the secret: nonce = 8-byte big-endian unix nanoseconds + 8
// random bytes, MAC = HMAC-SHA256(secret, nonce).
func (e *Engine) auth() *wire.Auth {
	if e.cfg.Secret == "" {
		return nil
	}
	nonce := make([]byte, 16)
	binary.BigEndian.PutUint64(nonce, uint64(time.Now().UnixNano()))
	_, _ = rand.Read(nonce[8:])
	m := hmac.New(sha256.New, []byte(e.cfg.Secret))
	m.Write(nonce)
	return &wire.Auth{Nonce: nonce, MAC: m.Sum(nil)}
}

// replayGuard remembers the nonces accepted within the last window and
// rejects repeats and nonces whose timestamp is outside the window.
type replayGuard struct {
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time
}

func newReplayGuard(window time.Duration, now func() time.Time) *replayGuard {
	return &replayGuard{window: window, now: now, seen: map[string]time.Time{}}
}

func (g *replayGuard) fresh(nonce []byte) bool {
	if len(nonce) < 16 {
		return false
	}
	ts := time.Unix(0, int64(binary.BigEndian.Uint64(nonce[:8])))
	now := g.now()
	if d := now.Sub(ts); d > g.window || d < -g.window {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	key := string(nonce)
	if _, ok := g.seen[key]; ok {
		return false
	}
	if len(g.seen) >= 1024 {
		for k, t := range g.seen {
			if now.Sub(t) > g.window {
				delete(g.seen, k)
			}
		}
	}
	g.seen[key] = ts
	return true
}

// exchange dials addr, sends one control frame and reads the reply. On
// success with keep, the connection is returned open.
func (e *Engine) exchange(ctx context.Context, addr string, typ byte, req wire.Control, keep bool) (wire.Control, net.Conn, error) {
	if e.closed.Load() {
		return wire.Control{}, nil, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.HandshakeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return wire.Control{}, nil, fmt.Errorf("%w: %w", ErrPeerDown, err)
	}
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req.Auth = e.auth()
	b, err := json.Marshal(req)
	if err == nil {
		err = wire.WriteFrame(c, typ, b)
	}
	var rep wire.Control
	if err == nil {
		var body []byte
		_, body, err = wire.ReadFrame(c, max(e.cfg.MaxFrame, 64<<20))
		if err == nil {
			rep, err = wire.DecodeControl(body)
		}
	}
	if err != nil {
		_ = c.Close()
		if ctx.Err() != nil {
			return wire.Control{}, nil, fmt.Errorf("%w: handshake with %s: %w", ErrTimeout, addr, err)
		}
		return wire.Control{}, nil, fmt.Errorf("%w: handshake with %s: %w", ErrPeerDown, addr, err)
	}
	if !rep.OK {
		_ = c.Close()
		if rep.Code == "auth" {
			return rep, nil, fmt.Errorf("%w: %s refused our secret", ErrAuth, addr)
		}
		return rep, nil, fmt.Errorf("transfer: %s: %s (%s)", addr, rep.Error, rep.Code)
	}
	if !keep {
		_ = c.Close()
		return rep, nil, nil
	}
	_ = c.SetDeadline(time.Time{})
	return rep, c, nil
}

func (e *Engine) call(ctx context.Context, addr string, typ byte, req wire.Control) (wire.Control, error) {
	rep, _, err := e.exchange(ctx, addr, typ, req, false)
	return rep, err
}

// dialLane opens data lane i to addr; vectored reports whether the peer
// said the lane serves scatter-gather requests.
func (e *Engine) dialLane(ctx context.Context, addr string, lane int) (c net.Conn, vectored bool, err error) {
	rep, c, err := e.exchange(ctx, addr, wire.FrameLane, wire.Control{Lane: &wire.Lane{Index: lane, Checksum: e.cfg.Checksum, From: e.name}}, true)
	return c, rep.Vectored && !e.cfg.noVectored, err
}

// publish writes this engine's descriptor to the metadata service.
func (e *Engine) publish(ctx context.Context) error {
	if e.meta == nil {
		return nil
	}
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	b, err := json.Marshal(e.descriptor())
	if err != nil {
		return err
	}
	if err := e.meta.Put(ctx, wire.SegmentKey(e.name), b); err != nil {
		return fmt.Errorf("transfer: publish segment: %w", err)
	}
	return nil
}

// republish refreshes the published descriptor after a registration change.
func (e *Engine) republish() {
	if e.meta == nil || e.closed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.HandshakeTimeout)
	defer cancel()
	if err := e.publish(ctx); err != nil {
		e.log.Warn("transfer: metadata update failed", "err", err)
	}
}
