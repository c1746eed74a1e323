package tracesim

import (
	"strconv"

	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// eventFeed turns the simulated caches' changes into vLLM KV event
// batches, encodes and decodes them with the wire codec, and feeds the
// router's kvevents.Index, as a proxy following real instances would. A
// trace block id is already a chained identity, so each block travels as a
// one-token block (token = its id) with no parent.
type eventFeed struct {
	index   *kvevents.Index
	pending [][]kvevents.Event
}

func newEventFeed(n int) *eventFeed {
	return &eventFeed{index: kvevents.NewIndex(), pending: make([][]kvevents.Event, n)}
}

func (f *eventFeed) name(i int) string { return "instance-" + strconv.Itoa(i) }

type instanceEvents struct {
	f *eventFeed
	i int
}

func (f *eventFeed) Events(i int) CacheEvents { return instanceEvents{f, i} }

// Prefixes flushes the pending events into the index and reads each
// instance's prefix of ids from it.
func (f *eventFeed) Prefixes(ids []int64, into []int) error {
	if err := f.flush(); err != nil {
		return err
	}
	keys := f.keys(ids)
	for i := range into {
		into[i] = f.index.Matched(f.name(i), keys)
	}
	return nil
}

func (e instanceEvents) Stored(id int64) {
	e.f.pending[e.i] = append(e.f.pending[e.i], kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(uint64(id))},
		TokenIDs: []int{int(id)}, BlockSize: 1, Medium: kvevents.MediumGPU})
}

func (e instanceEvents) Removed(id int64) {
	e.f.pending[e.i] = append(e.f.pending[e.i], kvevents.BlockRemoved{BlockHashes: []kvevents.Hash{kvevents.IntHash(uint64(id))}, Medium: kvevents.MediumGPU})
}

// flush publishes each instance's pending events as one batch, through
// the codec, into the index.
func (f *eventFeed) flush() error {
	for i, evs := range f.pending {
		if len(evs) == 0 {
			continue
		}
		payload, err := kvevents.Encode(kvevents.Batch{Events: evs}, i%2 == 0) // both encodings
		if err != nil {
			return err
		}
		b, err := kvevents.Decode(payload)
		if err != nil {
			return err
		}
		f.index.Apply(f.name(i), b)
		f.pending[i] = f.pending[i][:0]
	}
	return nil
}

// keys names a request's blocks as the index does.
func (f *eventFeed) keys(ids []int64) []uint64 {
	root := kvcache.RootHash("")
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = kvcache.HashBlock(root, []int{int(id)}).Uint64()
	}
	return out
}
