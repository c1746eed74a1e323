package tracesim

import (
	"math/bits"
	"slices"
	"sort"
)

// ClassCeiling is the class ceiling (SimulateClassCeiling): the most hits
// a policy can get when all it knows of a block is its class and its age.
// It is fitted to the trace it reports on, so it is a yardstick, not a
// policy, and it is not in Policies.
const ClassCeiling Policy = 101

// The classes of SimulateClassCeiling: a block's request's turn (0..3),
// the earlier requests that held the block (0..3), the request's new
// blocks (log2 buckets 0..4), the block's depth (log2 buckets 0..7) and
// whether it is the request's last block (the partial tail).
const (
	ceilTurns   = 4
	ceilSeen    = 4
	ceilNew     = 5
	ceilDepth   = 8
	ceilClasses = ceilTurns * ceilSeen * ceilNew * ceilDepth * 2
)

// SimulateClassCeiling estimates the best hit rate of any eviction policy
// whose knowledge of a cached block is its class and its age, on the
// trace itself: what an online policy could reach if it knew, for every
// class, the distribution of the time to the block's next use exactly.
//
// A block's class is what a pool can see when the block is cached: the
// turn of its request (0 for a chain seen for the first time, t+1 for a
// request whose leading run of known blocks, past the first block, ends in
// a block of a request of turn t; capped at 3, as evict.Retention's), the
// number of earlier requests that held the block (capped at 3: a pool
// that remembers every block it saw), the number of blocks the request
// adds to what was known (log2 buckets: 0, 1-2, 3-6, 7-14, 15 and more),
// the block's position in the prompt (log2 buckets: 0, 1, 2-3, ..., 64
// and more) and whether it is the prompt's last block (partial in most
// prompts: Meta.Partial). Time is counted in block insertions, the pool's
// own clock.
//
// Given the class, the policy's only choice is how long each block may
// stay: a block kept T insertions is hit at its next use if that comes
// within T, and costs min(T, time to its next use or to the trace's end)
// in block-insertions of space. For every class and every T of a
// geometric grid (1.25 apart) the replay counts these hits and costs over
// the trace, then spends the capacity, as an average number of blocks held
// over the trace, on the classes' (T, hits) options in order of hits per
// block of space (a fractional knapsack over each class's upper concave
// hull: mixing two retentions in one class is allowed). Three relaxations
// make it an overestimate of what such a policy can do: the capacity is
// held on average, not at every instant; a block counts as hit when it is
// kept, even if a block before it in the prompt is not; and the per-class
// statistics are the trace's own, known in advance. evict.Retention and
// TailFirst use less than this (turns, comebacks only while cached,
// partial tails, depth as an order within a request), so their hit rates
// should lie below the ceiling; a policy that wants to come closer to
// Belady than the ceiling needs information beyond these classes.
//
// The capacity Unlimited gives IdealHits.
func SimulateClassCeiling(reqs []Request, capacity int) CacheResult {
	ordered := Ordered(reqs)
	res := CacheResult{Policy: ClassCeiling, Capacity: max(capacity, Unlimited)}
	for _, r := range ordered {
		res.Requests++
		res.Blocks += len(r.HashIDs)
	}
	if capacity == Unlimited {
		res.Hits, _ = IdealHits(reqs)
		return res
	}
	if res.Blocks == 0 {
		return res
	}
	total := int64(res.Blocks)

	type occ struct {
		at  int64 // insertions before the request that holds it
		cls uint16
	}
	var (
		next    [ceilClasses][]int64 // time to the next use, per class
		end     [ceilClasses][]int64 // time to the trace's end, of blocks not used again
		pending = make(map[int64]occ)
		seen    = make(map[int64]uint8) // earlier requests that held the block (saturating)
		lastReq = make(map[int64]int32) // the latest request that held the block
		gen     = make(map[int64]int32) // the latest request that touched it (repeated ids)
		turns   = make([]uint8, len(ordered))
		at      int64
	)
	for i, r := range ordered {
		ids := r.HashIDs
		run := 0
		for run < len(ids) {
			if _, ok := lastReq[ids[run]]; !ok {
				break
			}
			run++
		}
		turn := 0
		if run >= 2 { // a chain extends another past its first block
			turn = min(int(turns[lastReq[ids[run-1]]])+1, ceilTurns-1)
		}
		turns[i] = uint8(turn)
		fresh := bits.Len(uint(len(ids)-run+1)) - 1
		fresh = min(fresh, ceilNew-1)
		for pos, id := range ids {
			if g, ok := gen[id]; ok && g == int32(i)+1 {
				continue // a repeated id within one request counts once
			}
			gen[id] = int32(i) + 1
			if o, ok := pending[id]; ok {
				next[o.cls] = append(next[o.cls], at-o.at)
			}
			s := int(seen[id])
			d := min(bits.Len(uint(pos)), ceilDepth-1)
			cls := (((turn*ceilSeen+s)*ceilNew+fresh)*ceilDepth + d) * 2
			if pos == len(ids)-1 {
				cls++ // the last block: partial in most prompts
			}
			pending[id] = occ{at: at, cls: uint16(cls)}
		}
		for _, id := range ids {
			if seen[id] < ceilSeen-1 {
				seen[id]++
			}
			lastReq[id] = int32(i)
		}
		at += int64(len(ids))
	}
	for _, o := range pending {
		end[o.cls] = append(end[o.cls], total-o.at)
	}

	var grid []int64
	for t := int64(1); t < total; t = max(t+1, t*5/4) {
		grid = append(grid, t)
	}
	grid = append(grid, total)

	type seg struct{ slope, space, hits float64 }
	var segs []seg
	for c := range ceilClasses {
		ws, es := next[c], end[c]
		if len(ws) == 0 {
			continue // no hits to buy
		}
		slices.Sort(ws)
		slices.Sort(es)
		wsum, esum := prefixSums(ws), prefixSums(es)
		type pt struct{ space, hits float64 }
		hull := []pt{{0, 0}}
		for _, t := range grid {
			k := sort.Search(len(ws), func(j int) bool { return ws[j] > t })
			m := sort.Search(len(es), func(j int) bool { return es[j] > t })
			space := float64(wsum[k]+int64(len(ws)-k)*t+esum[m]+int64(len(es)-m)*t) / float64(total)
			p := pt{space, float64(k)}
			for len(hull) >= 2 {
				a, b := hull[len(hull)-2], hull[len(hull)-1]
				if (b.hits-a.hits)*(p.space-a.space) <= (p.hits-a.hits)*(b.space-a.space) {
					hull = hull[:len(hull)-1] // b lies on or under the chord a-p
					continue
				}
				break
			}
			hull = append(hull, p)
		}
		for j := 1; j < len(hull); j++ {
			a, b := hull[j-1], hull[j]
			if b.hits > a.hits && b.space > a.space {
				segs = append(segs, seg{(b.hits - a.hits) / (b.space - a.space), b.space - a.space, b.hits - a.hits})
			}
		}
	}
	slices.SortStableFunc(segs, func(a, b seg) int {
		switch {
		case a.slope > b.slope:
			return -1
		case a.slope < b.slope:
			return 1
		}
		return 0
	})
	left, hits := float64(capacity), 0.0
	for _, s := range segs {
		if s.space <= left {
			left -= s.space
			hits += s.hits
			continue
		}
		hits += s.hits * left / s.space
		break
	}
	res.Hits = int(hits)
	return res
}

func prefixSums(v []int64) []int64 {
	s := make([]int64, len(v)+1)
	for i, x := range v {
		s[i+1] = s[i] + x
	}
	return s
}
