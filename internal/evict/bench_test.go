package evict

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// benchStream is a conversation-like request stream: each request is a
// chain of 4 to 28 blocks; a third continue an earlier chain (its blocks
// then new ones), the rest start a new one under a shared root.
type benchStream struct {
	rng    *rand.Rand
	chains [][]int
	next   int
}

func newBenchStream() *benchStream {
	return &benchStream{rng: rand.New(rand.NewPCG(1, 2)), next: 1}
}

func (s *benchStream) request() []int {
	var ids []int
	if len(s.chains) > 0 && s.rng.IntN(3) == 0 {
		i := s.rng.IntN(len(s.chains))
		ids = append(ids, s.chains[i]...)
	} else {
		ids = []int{0}
	}
	for range 3 + s.rng.IntN(8) {
		ids = append(ids, s.next)
		s.next++
	}
	if len(ids) > 28 {
		ids = ids[len(ids)-28:]
	}
	if len(s.chains) < 4096 {
		s.chains = append(s.chains, ids)
	} else {
		s.chains[s.rng.IntN(len(s.chains))] = ids
	}
	return ids
}

// serve plays one request on a pool of n items kept by p: its cached
// blocks are taken out, the pool evicts to make room for the rest, and
// the request's blocks come back as one group. It returns the evictions.
func serve(p Policy[int], cached map[int]bool, ids []int, g uint64, n int) (victims int) {
	for _, id := range ids {
		if cached[id] {
			p.Remove(id)
		}
	}
	for _, id := range ids {
		if cached[id] {
			continue
		}
		for len(cached) >= n {
			v, ok := p.Victim()
			if !ok {
				break
			}
			delete(cached, v)
			victims++
		}
		cached[id] = true
	}
	for d, id := range ids {
		p.Add(id, Meta{Group: g, Depth: d, Partial: d == len(ids)-1, Hash: uint64(id) + 1})
	}
	return victims
}

// BenchmarkPolicy: one op is one request of the stream on a full pool of
// 10,000 blocks (about 15 Adds, 10 Removes and 5 Victims). Metrics:
// victims/s (eviction decisions per second) and bytes/item (heap per
// tracked item of a policy holding 100,000 items, with its history).
// Compare policies within one run: docs/cache-policy.md lists the ratios.
func BenchmarkPolicy(b *testing.B) {
	for _, k := range Kinds {
		b.Run(string(k), func(b *testing.B) {
			const n = 10000
			p, _ := New[int](k)
			if r, ok := p.(*Retention[int]); ok {
				r.SetCapacity(n)
			}
			s := newBenchStream()
			cached := map[int]bool{}
			var g uint64
			for range 4 * n / 10 { // warm up: fill the pool
				g++
				serve(p, cached, s.request(), g, n)
			}
			victims := 0
			b.ResetTimer()
			for range b.N {
				g++
				victims += serve(p, cached, s.request(), g, n)
			}
			b.StopTimer()
			b.ReportMetric(float64(victims)/b.Elapsed().Seconds(), "victims/s")
			b.ReportMetric(bytesPerItem(k, 100000), "bytes/item")
		})
	}
}

// bytesPerItem measures the heap a policy of kind k takes to hold n items
// added as a stream of requests (so Retention's turn history is full).
// The requests are made before the measurement.
func bytesPerItem(k Kind, n int) float64 {
	s := newBenchStream()
	var reqs [][]int
	for total := 0; total < 2*n; total += len(reqs[len(reqs)-1]) {
		reqs = append(reqs, s.request())
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, _ := New[int](k)
	if r, ok := p.(*Retention[int]); ok {
		r.SetCapacity(n)
	}
	for g, ids := range reqs {
		if p.Len() >= n {
			break
		}
		for d, id := range ids {
			p.Add(id, Meta{Group: uint64(g + 1), Depth: d, Hash: uint64(id) + 1})
		}
	}
	p.Remove(-1) // place the last group
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(p)
	runtime.KeepAlive(reqs)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(p.Len())
}

// BenchmarkPolicyRatio serves the same request stream through every policy,
// interleaved request by request, and reports each policy's time per
// request as a ratio to LRU's ("<kind>/lru": 2 means half LRU's eviction
// decisions per second), and its heap bytes per tracked item as a ratio to
// LRU's ("<kind>-bytes/lru"). Interleaving keeps the ratio steady on a
// loaded machine, where absolute times swing.
func BenchmarkPolicyRatio(b *testing.B) {
	const n = 10000
	type run struct {
		p      Policy[int]
		s      *benchStream
		cached map[int]bool
		spent  time.Duration
	}
	runs := make([]*run, len(Kinds))
	for i, k := range Kinds {
		p, _ := New[int](k)
		if r, ok := p.(*Retention[int]); ok {
			r.SetCapacity(n)
		}
		runs[i] = &run{p: p, s: newBenchStream(), cached: map[int]bool{}}
	}
	var g uint64
	for range 4 * n / 10 {
		g++
		for _, r := range runs {
			serve(r.p, r.cached, r.s.request(), g, n)
		}
	}
	b.ResetTimer()
	for range b.N {
		g++
		for _, r := range runs {
			ids := r.s.request()
			t0 := time.Now()
			serve(r.p, r.cached, ids, g, n)
			r.spent += time.Since(t0)
		}
	}
	b.StopTimer()
	lruBytes := bytesPerItem(KindLRU, 100000)
	for i, k := range Kinds {
		if k == KindLRU {
			continue
		}
		b.ReportMetric(float64(runs[i].spent)/float64(runs[0].spent), string(k)+"/lru")
		b.ReportMetric(bytesPerItem(k, 100000)/lruBytes, string(k)+"-bytes/lru")
	}
}
