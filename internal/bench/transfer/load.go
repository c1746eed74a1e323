package transfer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/transfer"
)

// LoadResult is the small-during-large figure: latency of small synchronous
// transfers while a large stream to the same peer is running.
type LoadResult struct {
	Transport    string  `json:"transport"`
	Scenario     string  `json:"scenario"`
	LargeBytes   int     `json:"large_bytes"`
	SmallBytes   int     `json:"small_bytes"`
	Samples      int     `json:"samples"`
	P50us        float64 `json:"p50_us"`
	P99us        float64 `json:"p99_us"`
	StreamGBPerS float64 `json:"stream_gb_per_s"`
}

func (r LoadResult) String() string {
	return fmt.Sprintf("%s: %d-byte sync transfers during a running %d-byte stream: p50 %.0f us, p99 %.0f us over %d samples (stream %.3f GB/s)",
		r.Transport, r.SmallBytes, r.LargeBytes, r.P50us, r.P99us, r.Samples, r.StreamGBPerS)
}

// LargeSize is the default large stream request.
const LargeSize = 64 << 20

// SmallDuringLarge runs back-to-back LargeSize WRITEs from one goroutine and,
// meanwhile, small sync WRITEs of small bytes, for d. The target buffer must
// hold LargeSize+small bytes.
func SmallDuringLarge(ctx context.Context, c Config, target TargetInfo, small int, d time.Duration) (LoadResult, error) {
	if target.Len < LargeSize+small {
		return LoadResult{}, fmt.Errorf("bench transfer: target buffer %d < %d", target.Len, LargeSize+small)
	}
	e, err := transfer.Open(ctx, engineConfig(c))
	if err != nil {
		return LoadResult{}, err
	}
	defer e.Close()
	local, free, err := c.allocate(e, c.Device, LargeSize+small)
	if err != nil {
		return LoadResult{}, err
	}
	defer free()
	seg, err := e.OpenSegment(ctx, target.Segment)
	if err != nil {
		return LoadResult{}, err
	}
	large := []transfer.Request{{Op: transfer.OpWrite, Local: local, Segment: seg, Remote: target.Addr, Length: LargeSize}}
	smallReq := []transfer.Request{{Op: transfer.OpWrite, Local: local + LargeSize, Segment: seg, Remote: target.Addr + LargeSize, Length: small}}
	// Warm up both paths (dials the lanes).
	if err := e.Transfer(ctx, smallReq); err != nil {
		return LoadResult{}, err
	}
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		streamed atomic.Int64
		wg       sync.WaitGroup
		bgErr    error
		started  = time.Now()
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for runCtx.Err() == nil {
			if err := e.Transfer(ctx, large); err != nil {
				bgErr = err
				cancel()
				return
			}
			streamed.Add(LargeSize)
		}
	}()
	var lats []time.Duration
	var fgErr error
	for runCtx.Err() == nil {
		t0 := time.Now()
		if err := e.Transfer(ctx, smallReq); err != nil {
			fgErr = err
			break
		}
		lats = append(lats, time.Since(t0))
		// Pace the probes so they sample the stream rather than saturate it.
		select {
		case <-runCtx.Done():
		case <-time.After(200 * time.Microsecond):
		}
	}
	wg.Wait()
	el := time.Since(started).Seconds()
	if err := errors.Join(bgErr, fgErr); err != nil {
		return LoadResult{}, err
	}
	slices.Sort(lats)
	return LoadResult{Transport: c.Transport, Scenario: "small_during_large", LargeBytes: LargeSize, SmallBytes: small,
		Samples: len(lats), P50us: pct(lats, 0.5), P99us: pct(lats, 0.99), StreamGBPerS: float64(streamed.Load()) / el / 1e9}, nil
}
