package transfer

import (
	"context"
	"errors"
	"time"

	"github.com/kvcache-go/mooncake/internal/metadata"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// keepPublished re-publishes the engine's descriptor whenever the metadata
// service has lost it: an HTTP metadata server keeps its keys in memory, so
// after a restart every engine's key is gone and peers joining later would
// not find them. Every Config.MetadataRefresh the engine reads its own key
// and puts it back when it is missing. A service that does not answer is
// retried at the next tick.
func (e *Engine) keepPublished(every time.Duration) {
	defer e.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	key := wire.SegmentKey(e.name)
	for {
		select {
		case <-e.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.HandshakeTimeout)
		_, err := e.meta.Get(ctx, key)
		if errors.Is(err, metadata.ErrNotFound) && !e.closed.Load() {
			if err := e.publish(ctx); err != nil {
				e.log.Warn("transfer: re-publish segment", "segment", e.name, "err", err)
			} else {
				e.log.Info("transfer: segment re-published (the metadata service had lost it)", "segment", e.name)
			}
		}
		cancel()
	}
}
