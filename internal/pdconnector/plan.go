package pdconnector

import (
	"fmt"

	"github.com/kvcache-go/mooncake/transfer"
)

// Side is one engine's KV memory as the write planner sees it: the base
// address of every layer region of some of its tensor-parallel ranks, and
// how many KV heads each rank holds. Bases[i] is rank FirstRank+i, which
// holds the global heads [(FirstRank+i)*RankHeads, (FirstRank+i+1)*RankHeads).
// Blocks are head major (kvcache.Layout): a block of a rank's region is
// RankHeads*headBytes bytes, head after head.
type Side struct {
	Bases     [][]uint64 // [rank][layer]
	FirstRank int
	RankHeads int
}

func (s Side) check(what string, layer int) error {
	if s.RankHeads <= 0 || len(s.Bases) == 0 {
		return fmt.Errorf("pdconnector: %s side has no ranks or heads", what)
	}
	for i, b := range s.Bases {
		if layer < 0 || layer >= len(b) {
			return fmt.Errorf("pdconnector: %s rank %d has %d layers, no layer %d", what, s.FirstRank+i, len(b), layer)
		}
	}
	return nil
}

// PlanLayerWrites builds the WRITE that copies layer's blocks srcBlocks[i]
// of the local side src to blocks dstBlocks[i] of the remote side dst on
// segment seg, each destination rank getting exactly its heads from the
// source ranks that hold them (any TP on either side). It is ONE request
// (nil without blocks) whose extents are contiguous byte runs: for every
// run of consecutive (source, destination) block pairs and every pair of
// (source rank, destination rank) whose heads overlap, one extent for the
// whole run when the overlap is every head of both ranks (equal TP), else
// one per block of the run for the overlapping head range (a head range of
// one block is contiguous). Extents are ordered by block, then source
// rank, then destination rank, so both sides' memory is walked forward
// block by block. One extent makes a plain request, more a scatter-gather
// request (transfer.Request.Extents): one task, one memcpy per extent
// over shared memory, one round trip per TCP slice, however the blocks
// lie. Never one per token slot.
func PlanLayerWrites(seg transfer.SegmentID, src, dst Side, headBytes int, srcBlocks, dstBlocks []int, layer int) ([]transfer.Request, error) {
	if len(srcBlocks) != len(dstBlocks) {
		return nil, fmt.Errorf("pdconnector: %d source blocks for %d destination blocks", len(srcBlocks), len(dstBlocks))
	}
	if err := src.check("local", layer); err != nil {
		return nil, err
	}
	if err := dst.check("remote", layer); err != nil {
		return nil, err
	}
	if headBytes <= 0 {
		return nil, fmt.Errorf("pdconnector: head bytes %d", headBytes)
	}
	var runs [][3]int // src start, dst start, length
	if len(srcBlocks) > 0 {
		runs = make([][3]int, 0, 4)
	}
	for i := 0; i < len(srcBlocks); {
		j := i + 1
		for j < len(srcBlocks) && srcBlocks[j] == srcBlocks[j-1]+1 && dstBlocks[j] == dstBlocks[j-1]+1 {
			j++
		}
		runs = append(runs, [3]int{srcBlocks[i], dstBlocks[i], j - i})
		i = j
	}
	if len(runs) == 0 {
		return nil, nil
	}
	// The overlapping (source rank, destination rank) pairs: their bases
	// and the head range's offset in each side's block.
	type pair struct {
		sBase, dBase uint64
		sOff, dOff   int
		n            int
	}
	var pairs []pair
	sbb, dbb := src.RankHeads*headBytes, dst.RankHeads*headBytes
	for i, sBases := range src.Bases {
		s0 := (src.FirstRank + i) * src.RankHeads
		for j, dBases := range dst.Bases {
			d0 := (dst.FirstRank + j) * dst.RankHeads
			a, b := max(d0, s0), min(d0+dst.RankHeads, s0+src.RankHeads)
			if a < b {
				pairs = append(pairs, pair{sBase: sBases[layer], dBase: dBases[layer], sOff: (a - s0) * headBytes, dOff: (a - d0) * headBytes, n: (b - a) * headBytes})
			}
		}
	}
	// Equal TP: one extent per run and rank; otherwise one per block and
	// overlapping rank pair. Sized up front: a push plans a prompt's
	// thousands of extents, and growing the slice would copy them again
	// and again.
	whole := len(pairs) > 0 && pairs[0].n == sbb && pairs[0].n == dbb
	n := len(runs) * len(pairs)
	if !whole {
		n = len(srcBlocks) * len(pairs)
	}
	ext := make([]transfer.Extent, 0, n)
	for _, r := range runs {
		if whole {
			// Equal TP: each rank's run is one contiguous range.
			for _, p := range pairs {
				ext = append(ext, transfer.Extent{Local: uintptr(p.sBase) + uintptr(r[0]*sbb), Remote: p.dBase + uint64(r[1]*dbb), Length: r[2] * p.n})
			}
			continue
		}
		for k := 0; k < r[2]; k++ {
			for _, p := range pairs {
				ext = append(ext, transfer.Extent{Local: uintptr(p.sBase) + uintptr((r[0]+k)*sbb+p.sOff),
					Remote: p.dBase + uint64((r[1]+k)*dbb+p.dOff), Length: p.n})
			}
		}
	}
	if len(ext) == 1 {
		return []transfer.Request{{Op: transfer.OpWrite, Local: ext[0].Local, Segment: seg, Remote: ext[0].Remote, Length: ext[0].Length}}, nil
	}
	total := 0
	for _, x := range ext {
		total += x.Length
	}
	return []transfer.Request{{Op: transfer.OpWrite, Segment: seg, Length: total, Extents: ext}}, nil
}

// PlanWrites is PlanLayerWrites for every layer of the local side: the
// result's element l holds layer l's requests, so a push may send the
// whole request at once or each layer as soon as it is computed.
func PlanWrites(seg transfer.SegmentID, src, dst Side, headBytes int, srcBlocks, dstBlocks []int) ([][]transfer.Request, error) {
	if len(src.Bases) == 0 {
		return nil, fmt.Errorf("pdconnector: local side has no ranks")
	}
	layers := len(src.Bases[0])
	for _, b := range dst.Bases {
		if len(b) != layers {
			return nil, fmt.Errorf("pdconnector: %d local layers, %d remote layers", layers, len(b))
		}
	}
	out := make([][]transfer.Request, layers)
	for l := range out {
		reqs, err := PlanLayerWrites(seg, src, dst, headBytes, srcBlocks, dstBlocks, l)
		if err != nil {
			return nil, err
		}
		out[l] = reqs
	}
	return out, nil
}
