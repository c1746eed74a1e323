package master

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// BatchExist answers as Exist does key by key, and refreshes recency.
func TestBatchExist(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20})
	mustPut(t, m, "done", 100, ReplicateConfig{})
	if _, err := m.PutStart("w", "pending", 100, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	before := m.objects.get("done").lastAccess
	clk.Advance(time.Second)
	keys := []string{"done", "pending", "missing", "", strings.Repeat("x", m.Config().MaxKeyLen+1), "done"}
	got := m.BatchExist(keys)
	if want := []bool{true, false, false, false, false, true}; !slices.Equal(got, want) {
		t.Fatalf("BatchExist = %v, want %v", got, want)
	}
	for i, k := range keys {
		if ok, _ := m.Exist(k); ok != got[i] {
			t.Fatalf("Exist(%q) = %v, BatchExist %v", k, ok, got[i])
		}
	}
	if m.objects.get("done").lastAccess <= before {
		t.Fatal("BatchExist did not refresh recency")
	}
}
