package tracesim

// PaperCapacities are the pool sizes (in 512-token blocks) of Table 1 of
// the Mooncake paper (arXiv 2407.00079 v3); Unlimited stands for "Inf".
var PaperCapacities = []int{Unlimited, 100000, 50000, 30000, 10000, 1000}

// paperTable1 holds Table 1's hit rates, measured by the authors on their
// arXiv trace (not the conversation trace), in PaperCapacities order.
var paperTable1 = map[Policy][]float64{
	LRU:         {0.51, 0.51, 0.50, 0.48, 0.40, 0.30},
	LFU:         {0.51, 0.51, 0.49, 0.43, 0.35, 0.30},
	LengthAware: {0.51, 0.50, 0.48, 0.42, 0.35, 0.30},
}

// PaperHitRate returns the paper's Table 1 hit rate for policy p at
// capacity (Unlimited for Inf), and false when the table has no such cell.
func PaperHitRate(p Policy, capacity int) (float64, bool) {
	row, ok := paperTable1[p]
	if !ok {
		return 0, false
	}
	for i, c := range PaperCapacities {
		if c == capacity {
			return row[i], true
		}
	}
	return 0, false
}
