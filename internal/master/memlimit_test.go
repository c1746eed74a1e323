package master

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// TestMemoryLimitRefusesNewObjects: above the admission mark of
// Config.Memory a new object is refused with NO_AVAILABLE_HANDLE naming the
// master's memory limit; stored objects stay readable and removable; once
// the usage falls back under the mark puts succeed again.
func TestMemoryLimitRefusesNewObjects(t *testing.T) {
	var used atomic.Uint64
	m, _ := newTestMaster(t, Config{Memory: MemoryLimit{Max: 1000, Usage: used.Load}}, map[string]uint64{"a": 1 << 20})
	used.Store(700)
	mustPut(t, m, "k0", 64, ReplicateConfig{})
	used.Store(801)
	_, err := m.PutStart("writer", "k1", 64, ReplicateConfig{})
	if !errors.Is(err, ErrNoSpace) || Code(err) != CodeNoAvailableHandle || !strings.Contains(err.Error(), "master memory limit") {
		t.Fatalf("put above the mark: %v (code %d)", err, Code(err))
	}
	if _, _, err := m.PutReserve("writer", 64, 8, ReplicateConfig{}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("slot above the mark: %v", err)
	}
	if st := m.Stats(); st.IncompleteObjects != 0 || st.Objects != 1 {
		t.Fatalf("a refused put left state behind: %+v", st)
	}
	if _, err := m.GetReplicaList("k0"); err != nil {
		t.Fatalf("stored object unreadable above the mark: %v", err)
	}
	if err := m.Remove("k0", true); err != nil {
		t.Fatalf("remove above the mark: %v", err)
	}
	used.Store(500)
	mustPut(t, m, "k1", 64, ReplicateConfig{})
}

// TestMemoryLimitRuntimeGauge: with no injected usage the master reads the
// Go runtime's heap, and a limit far below it refuses at once.
func TestMemoryLimitRuntimeGauge(t *testing.T) {
	if runtimeHeap.live() == 0 {
		t.Fatal("runtime heap reads 0")
	}
	m, _ := newTestMaster(t, Config{Memory: MemoryLimit{Max: 1 << 10}}, map[string]uint64{"a": 1 << 20})
	if _, err := m.PutStart("writer", "k", 64, ReplicateConfig{}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put with a 1 KiB memory limit: %v", err)
	}
	m2, _ := newTestMaster(t, Config{Memory: MemoryLimit{Max: 1 << 40}}, map[string]uint64{"a": 1 << 20})
	for i := range 10 {
		mustPut(t, m2, fmt.Sprint("k", i), 64, ReplicateConfig{})
	}
}
