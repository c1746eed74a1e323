package pdconnector

import (
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/transfer"
	"github.com/prometheus/client_golang/prometheus"
)

// Grants for P/D (Config.Grants). Decode owns its KV cache, so it both
// issues and checks the grants: no key is shared with anyone. For each
// pull, decode mints one-shot grants (WRITE, expiring at the pull's
// deadline) covering exactly the blocks it asks prefill to write, in every
// layer and rank the pull covers, and holds them live until the pull has
// ended (prefill answered, or the deadline passed); then it releases them,
// so a late or replayed write is refused even before the grant expires,
// and blocks decode reuses for another request are never writable with
// it. Prefill needs no key: it sends with each WRITE the grant that covers
// it (pullGrants.attach).

// mintPullGrants fills req.Grants for the pull's destination blocks and
// returns the function that releases them (a no-op without grants).
func (c *Connector) mintPullGrants(req *bootstrap.PullRequest, deadline time.Time) (release func(), err error) {
	v := c.cfg.Grants
	if v == nil || len(req.BlockIDs) == 0 {
		return func() {}, nil
	}
	layers, bb := c.layout.NumLayers, uint64(req.BlockBytes)
	xs := make([]grant.Extent, 0, len(req.LayerAddrs)*len(req.BlockIDs))
	for r := range max(1, req.TPRanks) {
		for _, base := range req.LayerAddrs[r*layers : (r+1)*layers] {
			for _, b := range req.BlockIDs {
				xs = append(xs, grant.Extent{Addr: base + uint64(b)*bb, Length: bb})
			}
		}
	}
	xs = grant.ExtentsOf(xs)
	var nonces []uint64
	release = func() {
		for _, n := range nonces {
			v.Release(n)
		}
	}
	for len(xs) > 0 {
		k := min(len(xs), 1+grant.MaxExtents)
		g := grant.Grant{Segment: req.Segment, Addr: xs[0].Addr, Length: xs[0].Length, Extents: xs[1:k],
			Mode: grant.Write, Expires: deadline}
		b, minted, err := v.MintOneShot(g)
		if err != nil {
			release()
			return func() {}, err
		}
		nonces = append(nonces, minted.Nonce)
		req.Grants = append(req.Grants, b)
		xs = xs[k:]
	}
	return release, nil
}

// pullGrants are a pull's grants as prefill sees them: decoded (not
// verified: prefill has no key, decode checks).
type pullGrants struct {
	raw []string // one string per grant, shared by its requests
	gs  []grant.Grant
}

func decodePullGrants(raw [][]byte) pullGrants {
	var p pullGrants
	for _, b := range raw {
		p.raw = append(p.raw, string(b))
		g, _, err := grant.Decode(b)
		if err != nil {
			g = grant.Grant{} // covers nothing: decode refuses what it would have covered
		}
		p.gs = append(p.gs, g)
	}
	return p
}

// attach sets each request's Grant to the pull grant covering its remote
// extent, or every extent of a scatter-gather request (none: the request
// goes without one, and decode refuses it). A scatter-gather request no
// single grant covers is split into plain requests, each with its own. It
// returns the requests.
func (p pullGrants) attach(reqs []transfer.Request) []transfer.Request {
	if len(p.gs) == 0 {
		return reqs
	}
	out := reqs[:0:0]
	for _, r := range reqs {
		if r.Extents == nil {
			r.Grant = p.find(func(g *grant.Grant) bool { return g.Covers(grant.Write, r.Remote, uint64(r.Length)) })
			out = append(out, r)
			continue
		}
		r.Grant = p.find(func(g *grant.Grant) bool {
			for _, x := range r.Extents {
				if !g.Covers(grant.Write, x.Remote, uint64(x.Length)) {
					return false
				}
			}
			return true
		})
		if r.Grant != "" {
			out = append(out, r)
			continue
		}
		for _, x := range r.Extents {
			q := transfer.Request{Op: r.Op, Local: x.Local, Segment: r.Segment, Remote: x.Remote, Length: x.Length}
			q.Grant = p.find(func(g *grant.Grant) bool { return g.Covers(grant.Write, q.Remote, uint64(q.Length)) })
			out = append(out, q)
		}
	}
	return out
}

// find is the raw form of the first grant ok accepts ("" for none).
func (p pullGrants) find(ok func(*grant.Grant) bool) string {
	for k := range p.gs {
		if ok(&p.gs[k]) {
			return p.raw[k]
		}
	}
	return ""
}

// grantCollectors are the decode engine's grant counters (none without
// grants).
func grantCollectors(v *grant.Verifier) []prometheus.Collector {
	if v == nil {
		return nil
	}
	counter := func(name, help string, f func(grant.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(v.Stats())) })
	}
	return []prometheus.Collector{
		counter("mooncake_pd_kv_grants_verified_total", "Decode side: one-shot KV grants that verified on arrival.", func(s grant.Stats) uint64 { return s.Verified }),
		counter("mooncake_pd_kv_grants_refused_total", "Decode side: KV grants refused on arrival (forged, expired, released, other key or segment).", func(s grant.Stats) uint64 { return s.Refused }),
		counter("mooncake_pd_kv_writes_denied_total", "Decode side: writes into the KV cache no live grant covered (nothing written).", func(s grant.Stats) uint64 { return s.Denied }),
	}
}
