package service

import (
	"context"
	"math/rand"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/conductor"
	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// BenchmarkIngestZMQ is event ingest end to end: a kvevents.Publisher
// sends batches of 16 events of 32 stored blocks each (an engine step's
// worth; vLLM's map encoding, engine hashes with token ids, block size 16)
// over loopback ZMQ to the service, which decodes the msgpack and indexes
// them; blocks/s counts blocks indexed.
// Compare with BenchmarkIngest/token_ids of internal/conductor (the same
// work in process):
//
//	go test -run '^$' -bench IngestZMQ -benchtime 20x ./internal/conductor/service
func BenchmarkIngestZMQ(b *testing.B) {
	s := New(Config{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.Run(ctx, ln) }()
	defer func() { cancel(); wg.Wait() }()
	pub, err := kvevents.NewPublisher(kvevents.Config{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", MapEncoding: true, BlockSize: 16})
	if err != nil {
		b.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); pub.Run(ctx) }()
	<-pub.Ready()
	ep, rep := pub.Endpoints()
	if _, err := s.Register(conductor.Registration{Kind: conductor.KindVLLM, Endpoint: ep, ReplayEndpoint: rep, Instance: "e",
		Identity: conductor.Identity{Model: "m", BlockSize: 16}}); err != nil {
		b.Fatal(err)
	}
	k := conductor.StreamKey{Instance: "e", Tenant: conductor.DefaultTenant}
	if !waitfor.Within(10*time.Second, func() bool { pub.Publish(); return s.Index().Stats()[k].Batches > 0 }) {
		b.Fatal("subscriber not connected")
	}
	const per, batches = 32, 1000
	rng := rand.New(rand.NewSource(1))
	evs := make([]kvevents.BlockStored, batches)
	for i := range evs {
		hs := make([]kvevents.Hash, per)
		for j := range hs {
			hs[j] = kvevents.IntHash(rng.Uint64())
		}
		tk := make([]int, per*16)
		for j := range tk {
			tk[j] = rng.Intn(150000)
		}
		evs[i] = kvevents.BlockStored{BlockHashes: hs, TokenIDs: tk, BlockSize: 16, Medium: "GPU"}
	}
	b.ResetTimer()
	c0 := processCPU()
	for n := 0; n < b.N; n++ {
		start := s.Index().Stats()[k].BlocksStored + s.Index().Stats()[k].StoredDuplicate
		for i := 0; i < len(evs); i += 16 {
			var step []kvevents.Event
			for _, e := range evs[i:min(i+16, len(evs))] {
				step = append(step, e)
			}
			pub.Publish(step...)
		}
		if !waitfor.Within(60*time.Second, func() bool {
			st := s.Index().Stats()[k]
			return st.BlocksStored+st.StoredDuplicate >= start+per*batches
		}) {
			b.Fatalf("not indexed: %+v %+v", s.Index().Stats()[k], s.SubStats()[k])
		}
	}
	b.ReportMetric(float64(b.N*per*batches)/b.Elapsed().Seconds(), "blocks/s")
	// blocks over the CPU time of the whole process (publisher, ZMQ,
	// subscriber, decode, index): a shared machine's preemption excluded.
	b.ReportMetric(float64(b.N*per*batches)/(processCPU()-c0).Seconds(), "blocks/cpu-s")
}

func processCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
