package conductor

import (
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// Benchmarks of the core (docs/conductor.md has the figures):
//
//	go test -run '^$' -bench . -benchtime 2x ./internal/conductor
//
// CONDUCTOR_BENCH_10M=1 adds the 10M-block sizes.

const benchBlockSize = 16

// BenchmarkIngest is in-process index ops: one op is one block stored or
// removed, in events of 32 blocks, as standard sequence hashes (ingest
// without token ids) or recomputed from token ids (engine hashes).
func BenchmarkIngest(b *testing.B) {
	for _, withTokens := range []bool{false, true} {
		name := "seq_hashes"
		if withTokens {
			name = "token_ids"
		}
		b.Run(name, func(b *testing.B) {
			x := New(Config{})
			for i := 0; i < 8; i++ {
				x.Register(Registration{Kind: KindVLLM, Instance: "i" + strconv.Itoa(i), Identity: Identity{Model: "m", BlockSize: benchBlockSize}})
			}
			const per = 32
			rng := rand.New(rand.NewSource(1))
			// a working set of 64k blocks per instance
			const events = 2048
			stored := make([]kvevents.Event, events)
			removed := make([]kvevents.Event, events)
			for e := range stored {
				hs := make([]kvevents.Hash, per)
				for i := range hs {
					hs[i] = kvevents.IntHash(rng.Uint64())
				}
				if withTokens {
					tk := make([]int, per*benchBlockSize)
					for i := range tk {
						tk[i] = rng.Intn(150000)
					}
					stored[e] = kvevents.BlockStored{BlockHashes: hs, TokenIDs: tk, BlockSize: benchBlockSize, Medium: "GPU"}
				} else {
					zero := 0
					stored[e] = kvevents.Standard{EventType: kvevents.EventStored, SeqHashes: hs, BaseBlockIdx: &zero, Medium: "gpu"}
				}
				removed[e] = kvevents.BlockRemoved{BlockHashes: hs, Medium: "GPU"}
			}
			// Steady state: every instance holds the working set; each
			// round evicts an event's blocks and stores them again.
			keys := make([]StreamKey, 8)
			for inst := range keys {
				keys[inst] = StreamKey{Instance: "i" + strconv.Itoa(inst), Tenant: DefaultTenant}
				for e := range stored {
					x.Apply(keys[inst], kvevents.Batch{Events: stored[e : e+1]})
				}
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			c0 := threadCPU()
			ops := 0
			for n := 0; n < b.N; n++ {
				for _, k := range keys {
					for e := range stored {
						x.Apply(k, kvevents.Batch{Events: removed[e : e+1]})
						x.Apply(k, kvevents.Batch{Events: stored[e : e+1]})
					}
					ops += 2 * events * per
				}
			}
			b.ReportMetric(float64(ops)/b.Elapsed().Seconds(), "ops/s")
			// per core: ops over the CPU time of the one thread doing them
			// (what a shared machine's preemption does not distort).
			b.ReportMetric(float64(ops)/(threadCPU()-c0).Seconds(), "ops/cpu-s")
		})
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// processCPU is the process's CPU time.
func processCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// fill indexes about total blocks over 8 instances: 64-block chains of
// random sequence hashes (the prompt's own blocks come later).
func fill(b *testing.B, total int) *Index {
	x := New(Config{})
	for i := 0; i < 8; i++ {
		x.Register(Registration{Kind: KindVLLM, Instance: "i" + strconv.Itoa(i), Identity: Identity{Model: "m", BlockSize: benchBlockSize}})
	}
	rng := rand.New(rand.NewSource(2))
	hs := make([]kvevents.Hash, 64)
	for done := 0; done < total; done += len(hs) {
		for i := range hs {
			hs[i] = kvevents.IntHash(rng.Uint64())
		}
		k := StreamKey{Instance: "i" + strconv.Itoa(rng.Intn(8)), Tenant: DefaultTenant}
		x.Apply(k, kvevents.Batch{Events: []kvevents.Event{kvevents.Standard{EventType: kvevents.EventStored, SeqHashes: hs, Medium: "gpu"}}})
	}
	return x
}

func sizes() []int {
	s := []int{1 << 20}
	if os.Getenv("CONDUCTOR_BENCH_10M") != "" {
		s = append(s, 10<<20)
	}
	return s
}

// BenchmarkQuery is /query's core: a prompt of 1k, 32k or 128k tokens
// whose every block is held (the longest walk: all blocks hashed and
// looked up) by one of 8 instances, another holding half on host, with
// 1M (10M) other blocks indexed. It reports p50 and p99 latency.
func BenchmarkQuery(b *testing.B) {
	for _, total := range sizes() {
		x := fill(b, total)
		for _, ntok := range []int{1 << 10, 32 << 10, 128 << 10} {
			rng := rand.New(rand.NewSource(int64(ntok)))
			prompt := make([]int, ntok)
			for i := range prompt {
				prompt[i] = rng.Intn(150000)
			}
			p32 := Tokens32(prompt)
			seqs := x.Hasher().SeqHashes(p32, benchBlockSize)
			var hs []kvevents.Hash
			for _, s := range seqs {
				hs = append(hs, kvevents.IntHash(s))
			}
			x.Apply(StreamKey{Instance: "i0", Tenant: DefaultTenant}, kvevents.Batch{Events: []kvevents.Event{kvevents.Standard{EventType: kvevents.EventStored, SeqHashes: hs, Medium: "gpu"}}})
			x.Apply(StreamKey{Instance: "i1", Tenant: DefaultTenant}, kvevents.Batch{Events: []kvevents.Event{kvevents.Standard{EventType: kvevents.EventStored, SeqHashes: hs[:len(hs)/2], Medium: "cpu"}}})
			q := Query{Identity: Identity{Model: "m", BlockSize: benchBlockSize}, Tokens: p32}
			b.Run(fmt.Sprintf("blocks=%dM/tokens=%dk", total>>20, ntok>>10), func(b *testing.B) {
				// Wall time, and the process's CPU time (what the query
				// costs when the machine is shared: preemption excluded;
				// the query is the only busy goroutine). Each query starts
				// after a yield, as a server's queries each run on a
				// goroutine of their own: the scheduler's forced
				// preemption of a goroutine running 10 ms does not land
				// in one.
				lat := make([]time.Duration, 0, b.N)
				cpu := make([]time.Duration, 0, b.N)
				b.ReportAllocs()
				b.ResetTimer()
				for n := 0; n < b.N; n++ {
					runtime.Gosched()
					c0 := processCPU()
					t0 := time.Now()
					r, err := x.Query(q)
					lat = append(lat, time.Since(t0))
					cpu = append(cpu, processCPU()-c0)
					if err != nil || r[DefaultTenant]["i0"].GPU != len(seqs)*benchBlockSize {
						b.Fatalf("%v %+v", err, r[DefaultTenant]["i0"])
					}
				}
				b.StopTimer()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
				b.ReportMetric(float64(lat[(len(lat)*9)/10].Nanoseconds())/1e3, "p90-us")
				b.ReportMetric(float64(lat[(len(lat)*99)/100].Nanoseconds())/1e3, "p99-us")
				sort.Slice(cpu, func(i, j int) bool { return cpu[i] < cpu[j] })
				b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds())/1e3, "cpu-p50-us")
				b.ReportMetric(float64(cpu[(len(cpu)*99)/100].Nanoseconds())/1e3, "cpu-p99-us")
			})
		}
	}
}

// fillEngine is fill with engine hashes and token ids (vLLM's events): the
// index keeps each publisher's hash alias and the context's memo too.
func fillEngine(b *testing.B, total int) *Index {
	x := New(Config{})
	for i := 0; i < 8; i++ {
		x.Register(Registration{Kind: KindVLLM, Instance: "i" + strconv.Itoa(i), Identity: Identity{Model: "m", BlockSize: benchBlockSize}})
	}
	rng := rand.New(rand.NewSource(3))
	hs := make([]kvevents.Hash, 64)
	tk := make([]int, 64*benchBlockSize)
	for done := 0; done < total; done += len(hs) {
		for i := range hs {
			hs[i] = kvevents.IntHash(rng.Uint64())
		}
		for i := range tk {
			tk[i] = rng.Intn(150000)
		}
		k := StreamKey{Instance: "i" + strconv.Itoa(rng.Intn(8)), Tenant: DefaultTenant}
		x.Apply(k, kvevents.Batch{Events: []kvevents.Event{kvevents.BlockStored{BlockHashes: hs, TokenIDs: tk, BlockSize: benchBlockSize, Medium: "GPU"}}})
	}
	return x
}

// BenchmarkMemoryPerBlock reports the heap bytes per indexed block at 1M
// (10M) blocks: named by their sequence hash (the block table only), and
// by engine hashes (the publisher's alias and the context's memo too).
func BenchmarkMemoryPerBlock(b *testing.B) {
	for _, total := range sizes() {
		for _, engine := range []bool{false, true} {
			name := fmt.Sprintf("blocks=%dM/seq_hashes", total>>20)
			fillf := fill
			if engine {
				name, fillf = fmt.Sprintf("blocks=%dM/engine_hashes", total>>20), fillEngine
			}
			b.Run(name, func(b *testing.B) {
				for n := 0; n < b.N; n++ {
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					x := fillf(b, total)
					runtime.GC()
					runtime.ReadMemStats(&after)
					b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(x.Blocks()), "B/block")
					runtime.KeepAlive(x)
				}
			})
		}
	}
}
