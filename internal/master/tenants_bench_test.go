package master

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvcache-go/mooncake/internal/tenant"
)

// BenchmarkTenantCommitNext: one client's 4 KiB upserts through CommitNext
// (the replaced version reused as its next slot) of random keys of a set
// of 16,384 (as `mooncake bench store --security` makes them) in a durable
// pool, with tenants off (raw keys, no accounts) and on (the
// keys in a tenant's namespace, accounts and quota admission): what a
// tenant's put costs the master, its lock held throughout.
func BenchmarkTenantCommitNext(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("tenants=%v", on), func(b *testing.B) {
			m, err := New(Config{Durable: true}, nil)
			if err != nil {
				b.Fatal(err)
			}
			spec := SegmentSpec{Name: "node-a", Endpoint: "10.0.0.1:7000", Base: 1 << 40, Size: 8 << 30}
			if err := m.MountSegment("store-a", spec); err != nil {
				b.Fatal(err)
			}
			ns := ""
			if on {
				m.SetTenantQuotas(quotaMap{"bench": {1 << 40, 0}})
				ns = tenant.Namespace("bench")
			}
			const id = "client-0-6f1c2a9e-4b3d-4c2e-9a61-000000000000"
			keys := make([]string, 16384)
			for i := range keys {
				keys[i] = fmt.Sprintf("%ss/tenants/4096/1/%d", ns, i)
				if _, err := m.PutStart(id, keys[i], 4096, ReplicateConfig{}); err != nil {
					b.Fatal(err)
				}
				if err := m.PutEnd(id, keys[i], 1); err != nil {
					b.Fatal(err)
				}
			}
			slot, _, err := m.PutReserveIn(id, ns, 4096, len(keys[0]), ReplicateConfig{})
			if err != nil {
				b.Fatal(err)
			}
			order := rand.New(rand.NewPCG(1, 7)).Perm(len(keys))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				key := keys[order[i%len(keys)]]
				out := m.CommitNext(id, key, slot, 1, ReplicateConfig{}, true, SlotAsk{Size: 4096, KeyLen: len(key)})
				if out.Gone || out.Err != nil || out.Slot == "" {
					b.Fatalf("CommitNext of %q = %+v", key, out)
				}
				slot = out.Slot
				i++
			}
		})
	}
}

// BenchmarkTenantWatermarkScan: one Tick's part of the comparison of the
// tenants' accounts with their eviction watermarks (a chunk of
// tenantScanChunk accounts, under the master's lock), with 4,096 tenants
// holding an object each, none over its watermark: what the per-tenant
// eviction costs a master with many tenants when it has nothing to evict.
func BenchmarkTenantWatermarkScan(b *testing.B) {
	m, err := New(Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	spec := SegmentSpec{Name: "node-a", Endpoint: "10.0.0.1:7000", Base: 1 << 40, Size: 8 << 30}
	if err := m.MountSegment("store-a", spec); err != nil {
		b.Fatal(err)
	}
	q := quotaMap{}
	for i := range tenant.MaxTenants {
		q[fmt.Sprintf("t%d", i)] = [2]uint64{1 << 30, 0}
	}
	m.SetTenantQuotas(q)
	for i := range tenant.MaxTenants {
		k := tenant.Namespace(fmt.Sprintf("t%d", i)) + "k"
		if _, err := m.PutStart("c", k, 4096, ReplicateConfig{}); err != nil {
			b.Fatal(err)
		}
		if err := m.PutEnd("c", k, 1); err != nil {
			b.Fatal(err)
		}
	}
	now := m.clock.Now()
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(tenantScanEvery)
		m.mu.Lock()
		m.tenantEvictLocked(now)
		m.mu.Unlock()
	}
}
