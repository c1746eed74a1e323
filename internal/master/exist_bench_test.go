package master

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// batchExistOneHold is BatchExist as one hold of the lock that checks and
// hashes each key under it: the reference BenchmarkBatchExist compares
// with.
func (m *Master) batchExistOneHold(keys []string) []bool {
	out := make([]bool, len(keys))
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for i, k := range keys {
		if m.checkKey(k) != nil {
			continue
		}
		if o := m.objects.get(k); o != nil && o.complete {
			o.touch(now)
			out[i] = true
		} else if _, ok := m.diskInfoLocked(k); ok {
			out[i] = true
		}
	}
	m.touchChainsLocked(keys, now)
	return out
}

// existLockedOnly runs only BatchExist's locked part (existSlice) over
// keys hashed beforehand: its time is the lock's hold. The hashing is
// outside the benchmark's timer.
func (m *Master) existLockedOnly(keys []string) []bool {
	b := existPrep[&keys[0]]
	out := make([]bool, len(keys))
	for lo := 0; lo < len(keys); lo += existHold {
		hi := min(lo+existHold, len(keys))
		m.existSlice(keys, b.idx[lo:hi], b.hs[lo:hi], nil, nil, out)
	}
	return out
}

type prepped struct {
	idx []int32
	hs  []uint32
}

// existPrep are the batches' positions and hashes, by their first key.
var existPrep = map[*string]prepped{}

// BenchmarkBatchExist: BatchExist of batches of 1,000 random keys (as
// `mooncake bench master` verifies a restart) and of 100,000 keys against
// a pool of 1M objects, by the sliced implementation ("sliced") and by
// one hold that hashes under the lock ("onehold"); "sliced-locked" times
// only the sliced implementation's holds of the lock (its ns/key against
// onehold's is the lock's hold per key). max-wait-us is the longest a lock
// taker (a ping every 50us) waited.
func BenchmarkBatchExist(b *testing.B) {
	const n = 1_000_000
	m, keys := benchPool(b, n, "bench-master/key/%012d")
	rng := rand.New(rand.NewPCG(1, 2))
	for _, batch := range []int{1000, 100_000} {
		batches := make([][]string, max(1, 2_000_000/batch))
		for i := range batches {
			batches[i] = make([]string, batch)
			for j := range batches[i] {
				batches[i][j] = keys[rng.IntN(n)]
			}
			p := prepped{}
			for j, k := range batches[i] {
				p.idx, p.hs = append(p.idx, int32(j)), append(p.hs, keyHash(k))
			}
			existPrep[&batches[i][0]] = p
		}
		for _, impl := range []struct {
			name string
			fn   func([]string) []bool
		}{{"onehold", m.batchExistOneHold}, {"sliced", m.BatchExist}, {"sliced-locked", m.existLockedOnly}} {
			b.Run(fmt.Sprintf("batch=%d/%s", batch, impl.name), func(b *testing.B) {
				// A pinger takes the lock as a ping does, and records
				// the longest wait.
				stop := make(chan struct{})
				var wg sync.WaitGroup
				var maxWait time.Duration
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						t0 := time.Now()
						m.mu.Lock()
						w := time.Since(t0)
						m.mu.Unlock()
						maxWait = max(maxWait, w)
						time.Sleep(50 * time.Microsecond)
					}
				})
				b.ResetTimer()
				for i := range b.N {
					for _, ok := range impl.fn(batches[i%len(batches)]) {
						if !ok {
							b.Fatal("key missing")
						}
					}
				}
				b.StopTimer()
				close(stop)
				wg.Wait()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/key")
				b.ReportMetric(float64(maxWait.Microseconds()), "max-wait-us")
			})
		}
	}
}
