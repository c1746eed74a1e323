package store

import (
	"math"
	"slices"
)

// Ratios are the per-round ratios of two configurations measured side by
// side (on over off), in round order: each round measures both, one right
// after the other, so that each ratio compares two measurements that saw
// the same moments of the machine's load. Their median is steadier than
// the ratio of each side's median round, which pairs measurements of
// different rounds (a burst of other load that hits one side of a round
// moves one ratio, not the median).
type Ratios []float64

// Median is the median ratio (the mean of the middle two for an even
// count); 0 without any.
func (r Ratios) Median() float64 { return r.quantile(0.5) }

// Quartiles are the first and third quartiles (linear interpolation): half
// the rounds lie between them.
func (r Ratios) Quartiles() (q1, q3 float64) { return r.quantile(0.25), r.quantile(0.75) }

func (r Ratios) quantile(q float64) float64 {
	var s []float64
	for _, x := range r {
		if x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}

// pairRatios returns, round by round, on's and off's ops/s ratio and their
// CPU time per key ratio (rows in round order, as many of each; a round
// either side measured nothing in is left out).
func pairRatios(off, on []Row) (ops, cpu Ratios) {
	for i := range min(len(off), len(on)) {
		a, b := off[i], on[i]
		if a.Ops == 0 || b.Ops == 0 {
			continue
		}
		ops = append(ops, b.OpsPerSec()/a.OpsPerSec())
		if a.CPUPerOp() > 0 {
			cpu = append(cpu, float64(b.CPUPerOp())/float64(a.CPUPerOp()))
		}
	}
	return ops, cpu
}
