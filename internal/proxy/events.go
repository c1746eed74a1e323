package proxy

import (
	"context"
	"sync"

	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// runSubscribers follows the KV events of every prefill instance that
// publishes them, feeding the prefix index, until ctx ends.
func (p *Proxy) runSubscribers(ctx context.Context, wg *sync.WaitGroup) {
	for _, in := range p.prefill {
		if in.events == "" {
			continue
		}
		sub, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{Instance: in.url, Endpoint: in.events,
			ReplayEndpoint: in.replay, Sink: p.events, Logger: p.log.With("instance", in.url)})
		if err != nil {
			p.log.Warn("kv events not followed", "instance", in.url, "err", err)
			continue
		}
		p.subsMu.Lock()
		if p.subs == nil {
			p.subs = map[string]*kvevents.Subscriber{}
		}
		p.subs[in.url] = sub
		p.subsMu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := sub.Run(ctx); err != nil {
					p.log.Warn("kv events", "instance", in.url, "err", err)
				}
			}
		}()
	}
}

// EventStats reports each followed prefill instance's KV event stream
// (applied, gaps, replayed, dropped, bad), by instance URL.
func (p *Proxy) EventStats() map[string]kvevents.SubStats {
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	out := map[string]kvevents.SubStats{}
	for u, s := range p.subs {
		out[u] = s.Stats()
	}
	return out
}

// EventIndex is the prefix index fed by the instances' KV events (nil when
// no prefill instance publishes them).
func (p *Proxy) EventIndex() *kvevents.Index { return p.events }
