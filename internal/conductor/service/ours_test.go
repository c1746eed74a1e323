package service

import (
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/conductor"
	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// Our own publishers over the wire: an engine's hooks (SHA-256 block
// hashes with token ids, kvevents.Publisher.BlockStored) and the store
// master's (an object key "prefix/<hex of the block hash>" entering the
// memory tier, ObjectStored). The conductor names both by the standard
// hash: the engine's device prefix, then the pool's host copy beyond it,
// for every instance of the model.
func TestOurEngineAndStoreMasterEvents(t *testing.T) {
	s, _ := start(t)
	eng := publisher(t, kvevents.Config{ReplayEndpoint: "tcp://127.0.0.1:0", BlockSize: 4, MapEncoding: true})
	master := publisher(t, kvevents.Config{ReplayEndpoint: "tcp://127.0.0.1:0"})
	for _, r := range []struct {
		kind conductor.Kind
		id   string
		pub  *kvevents.Publisher
	}{{conductor.KindVLLM, "engine-0", eng}, {conductor.KindVLLM, "engine-1", nil}, {conductor.KindMooncake, "store", master}} {
		ep, rep := "tcp://127.0.0.1:1", ""
		if r.pub != nil {
			ep, rep = r.pub.Endpoints()
		}
		if _, err := s.Register(conductor.Registration{Kind: r.kind, Endpoint: ep, ReplayEndpoint: rep, Instance: r.id,
			Identity: conductor.Identity{Model: "tiny", BlockSize: 4}}); err != nil {
			t.Fatal(err)
		}
	}
	tokens := []int{256, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 33, 33} // 4 blocks of 4
	hs := kvcache.HashBlocks("", 4, tokens)
	q := conductor.Query{Identity: conductor.Identity{Model: "tiny", BlockSize: 4}, Tokens: conductor.Tokens32(tokens)}
	// The engine computes the 4 blocks (announced), its connector saves
	// them to the pool (the master announces the objects), and the engine
	// evicts blocks 2-3 from its device.
	eng.BlockStored(hs, nil, tokens)
	waitfor.Cond(t, 10*time.Second, "the engine's blocks indexed", func() bool {
		eng.Publish()
		r, err := s.Index().Query(q)
		return err == nil && r["default"]["engine-0"].GPU == 16
	})
	// The eviction may reach the conductor before the pool's objects do:
	// they still resolve.
	eng.BlockRemoved(hs[2:])
	waitfor.Cond(t, 10*time.Second, "the eviction indexed", func() bool {
		eng.Publish()
		r, err := s.Index().Query(q)
		return err == nil && r["default"]["engine-0"].GPU == 8
	})
	for _, h := range hs {
		master.ObjectStored("kv/"+h.String(), "CPU")
	}
	waitfor.Cond(t, 10*time.Second, "both streams indexed", func() bool {
		eng.Publish()
		master.Publish()
		r, err := s.Index().Query(q)
		return err == nil && r["default"]["engine-0"].TierMatch == conductor.TierMatch{GPU: 8, CPU: 16, DISK: 16} &&
			r["default"]["engine-1"].TierMatch == conductor.TierMatch{GPU: 0, CPU: 16, DISK: 16}
	})
	if st := s.Index().Stats()[conductor.StreamKey{Instance: "store", Tenant: "default"}]; st.Unresolved != 0 || st.BlocksStored != 4 {
		t.Fatalf("store stream %+v", st)
	}
}
