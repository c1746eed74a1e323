package transfer

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestThousandConcurrentHandshakes: 1,000 handshakes (descriptor
// exchanges, each on a new connection) hit one engine at once from 10
// peers, then every peer writes and reads back through it concurrently.
// Nothing crashes, every call ends within its deadline (success, or a
// clear ErrPeerDown/ErrTimeout wrapping the cause), and the target still
// serves afterwards. (Mooncake crashed in its handshake under high
// concurrency and had transfers that never completed.)
func TestThousandConcurrentHandshakes(t *testing.T) {
	cfg := Config{Transport: TransportTCP, HandshakeTimeout: 20 * time.Second}
	tgt := openEngine(t, cfg)
	remote := make([]byte, 10<<16)
	if err := tgt.RegisterBytes(remote, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	const peers, each = 10, 100
	inis := make([]*Engine, peers)
	for i := range inis {
		inis[i] = openEngine(t, cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ok, failed atomic.Int64
	var mu sync.Mutex
	var firstErr error
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, ini := range inis {
		for range each {
			wg.Go(func() {
				<-start
				d, err := ini.Segment(ctx, tgt.Name())
				switch {
				case err == nil && len(d.Buffers) == 1:
					ok.Add(1)
				case err == nil:
					t.Errorf("descriptor with %d buffers", len(d.Buffers))
				case errors.Is(err, ErrPeerDown), errors.Is(err, ErrTimeout), errors.Is(err, ErrUnknownSegment):
					failed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				default:
					t.Errorf("handshake failed without a clear cause: %v", err)
				}
			})
		}
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d handshakes ok, %d failed clearly (first: %v) in %v", ok.Load(), failed.Load(), firstErr, time.Since(began).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatal("handshakes outlived their deadline")
	}
	if ok.Load() < peers*each/2 {
		t.Fatalf("only %d of %d handshakes succeeded", ok.Load(), peers*each)
	}
	// Every peer writes its own 64 KiB and reads it back, all at once.
	for i, ini := range inis {
		wg.Go(func() {
			seg, err := ini.OpenSegment(ctx, tgt.Name())
			if err != nil {
				t.Errorf("peer %d open: %v", i, err)
				return
			}
			local := make([]byte, 1<<16)
			fill(local, uint64(i+1))
			back := make([]byte, 1<<16)
			if err := ini.RegisterBytes(local, ""); err != nil {
				t.Error(err)
				return
			}
			if err := ini.RegisterBytes(back, ""); err != nil {
				t.Error(err)
				return
			}
			at := uint64(AddrOf(remote)) + uint64(i<<16)
			if err := ini.Transfer(ctx, []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: at, Length: len(local)}}); err != nil {
				t.Errorf("peer %d write: %v", i, err)
				return
			}
			if err := ini.Transfer(ctx, []Request{{Op: OpRead, Local: AddrOf(back), Segment: seg, Remote: at, Length: len(back)}}); err != nil {
				t.Errorf("peer %d read: %v", i, err)
				return
			}
			if !bytes.Equal(local, back) {
				t.Errorf("peer %d read back other data", i)
			}
		})
	}
	wg.Wait()
}
