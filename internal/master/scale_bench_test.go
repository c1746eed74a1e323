package master

import (
	"fmt"
	"testing"
)

// BenchmarkPoolSize: a put (PutStart+PutEnd), a get (GetReplicaList) and a
// remove of one key (its header zeroed by the node's next heartbeat),
// against pools of 10k and 1M objects: the per-call cost
// of the core at the pool's size (ns/op per size; the ratio 1M/10k is the
// figure).
func BenchmarkPoolSize(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			m, err := New(Config{Durable: true}, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.MountSegment("c", SegmentSpec{Name: "s", Endpoint: "e:1", Base: 1 << 30, Size: 1 << 40}); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				k := fmt.Sprintf("pool/%09d", i)
				if _, err := m.PutStart("c", k, 64, ReplicateConfig{}); err != nil {
					b.Fatal(err)
				}
				m.PutEnd("c", k, 1)
			}
			keys := make([]string, 4096)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench/%09d", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := keys[i%len(keys)]
				if _, err := m.PutStart("c", k, 64, ReplicateConfig{}); err != nil {
					b.Fatal(err)
				}
				m.PutEnd("c", k, 1)
				if _, err := m.GetReplicaList(k); err != nil {
					b.Fatal(err)
				}
				tombs, err := m.RemoveHeaders(k, true)
				if err != nil {
					b.Fatal(err)
				}
				m.Heartbeat("c", tombs) // the node zeroed the header

			}
		})
	}
}

// BenchmarkGet: GetReplicaList of existing keys in random order against a
// pool of 1M objects (the lookup's cache misses at the pool's size).
func BenchmarkGet(b *testing.B) {
	m, keys := benchPool(b, 1_000_000, "pool/%09d")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := m.GetReplicaList(keys[(i*7919)%len(keys)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList: a full listing of a pool of 1M objects in pages of 10k
// (as `mooncake bench master`'s bulk phase): ns/key is the work per key
// (a hold of the lock covers listHold keys, so it takes about listHold
// times that).
func BenchmarkList(b *testing.B) {
	const n = 1_000_000
	m, err := New(Config{Durable: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.MountSegment("c", SegmentSpec{Name: "s", Endpoint: "e:1", Base: 1 << 30, Size: 1 << 40}); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		k := fmt.Sprintf("obj/%09d", (i*7919)%n) // not in key order
		if _, err := m.PutStart("c", k, 64, ReplicateConfig{}); err != nil {
			b.Fatal(err)
		}
		m.PutEnd("c", k, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		total, after := 0, ""
		for {
			rows, next := m.List("", after, 10_000)
			total += len(rows)
			if next == "" {
				break
			}
			after = next
		}
		if total != n {
			b.Fatalf("listed %d of %d", total, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
}

// benchPool is a durable master with one segment holding n complete
// objects of 64 B named by format (applied to 0..n-1), and their keys.
func benchPool(b *testing.B, n int, format string) (*Master, []string) {
	b.Helper()
	m, err := New(Config{Durable: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.MountSegment("c", SegmentSpec{Name: "s", Endpoint: "e:1", Base: 1 << 30, Size: 1 << 40}); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf(format, i)
		if _, err := m.PutStart("c", keys[i], 64, ReplicateConfig{}); err != nil {
			b.Fatal(err)
		}
		m.PutEnd("c", keys[i], 1)
	}
	return m, keys
}
