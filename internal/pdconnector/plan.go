package pdconnector

import (
	"fmt"

	"github.com/kvcache-go/mooncake/transfer"
)

// PlanWrites builds the transfer requests that copy blocks src[i] of the
// local layer regions (base addresses srcLayers) to blocks dst[i] of the
// remote ones (dstLayers) on segment seg: one WRITE per run of consecutive
// (src, dst) pairs per layer, so a prompt whose blocks are contiguous on
// both sides moves with one request per layer.
func PlanWrites(seg transfer.SegmentID, srcLayers []uintptr, dstLayers []uint64, blockBytes int, src, dst []int) ([]transfer.Request, error) {
	if len(src) != len(dst) {
		return nil, fmt.Errorf("pdconnector: %d source blocks for %d destination blocks", len(src), len(dst))
	}
	if len(srcLayers) != len(dstLayers) {
		return nil, fmt.Errorf("pdconnector: %d local layers, %d remote layers", len(srcLayers), len(dstLayers))
	}
	var runs [][3]int // src start, dst start, length
	for i := 0; i < len(src); {
		j := i + 1
		for j < len(src) && src[j] == src[j-1]+1 && dst[j] == dst[j-1]+1 {
			j++
		}
		runs = append(runs, [3]int{src[i], dst[i], j - i})
		i = j
	}
	reqs := make([]transfer.Request, 0, len(runs)*len(srcLayers))
	for l := range srcLayers {
		for _, r := range runs {
			reqs = append(reqs, transfer.Request{
				Op:      transfer.OpWrite,
				Local:   srcLayers[l] + uintptr(r[0]*blockBytes),
				Segment: seg,
				Remote:  dstLayers[l] + uint64(r[1]*blockBytes),
				Length:  r[2] * blockBytes,
			})
		}
	}
	return reqs, nil
}
