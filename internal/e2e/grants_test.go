package e2e

import (
	"context"
	"testing"

	"github.com/kvcache-go/mooncake/internal/cluster"
)

// TestDisaggregatedWithGrants: with decode granting the KV blocks of each
// pull (kv_grants), disaggregated generation still equals colocated,
// every prompt's KV came from prefill, and the decode engine verified the
// grants (and refused nothing).
func TestDisaggregatedWithGrants(t *testing.T) {
	col := startColocated(t)
	c := startCluster(t, cluster.Config{Instance: cluster.InstanceConfig{PDGrants: true, Transport: "auto"}})
	ctx := context.Background()
	for i, p := range prompts[1:] {
		want := complete(t, ctx, col.URL, p, 8, false)
		got := complete(t, ctx, c.URL, p, 8, false)
		if want.Code != 200 || got.Code != 200 || !equalInts(want.TokenIDs, got.TokenIDs) {
			t.Fatalf("prompt %d: colocated %d %v, disaggregated %d %v %s", i, want.Code, want.TokenIDs, got.Code, got.TokenIDs, got.Raw)
		}
		if got.KV["kv_load"] != "remote" {
			t.Fatalf("prompt %d: kv_load %v, want remote (params %v)", i, got.KV["kv_load"], got.KV)
		}
	}
	st := c.Decode[0].TE.GrantStats()
	if st.Verified == 0 || st.Denied != 0 || st.Refused != 0 {
		t.Fatalf("decode grant stats %+v: want grants verified, none refused", st)
	}
	if v := metricValue(t, c.Decode[0].URL, "mooncake_pd_kv_grants_verified_total"); v != float64(st.Verified) {
		t.Fatalf("decode /metrics says %v grants verified, the engine %d", v, st.Verified)
	}
	if st := c.Prefill[0].TE.GrantStats(); st.Verified != 0 {
		t.Fatalf("prefill checks grants: %+v", st)
	}
	assertNoLeaks(t, c.Prefill[0], c.Decode[0])
}
