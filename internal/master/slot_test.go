package master

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
)

func reserve(t *testing.T, m *Master, client string, size uint64, key string) (string, []Replica) {
	t.Helper()
	slot, reps, err := m.PutReserveIn(client, namespaceOf(key), size, len(key), ReplicateConfig{})
	if err != nil || !strings.HasPrefix(slot, SlotPrefix) || len(reps) != 1 {
		t.Fatalf("PutReserve = %q, %v, %v", slot, reps, err)
	}
	return slot, reps
}

// A slot committed under a key is that key's object: visible, with the
// slot's space and sequence number; it is invisible before.
func TestPutSlotCommit(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	slot, reps := reserve(t, m, "w", 100, "key1")
	if reps[0].HeaderLen != headerLen("key1") || reps[0].Seq == 0 {
		t.Fatalf("slot replica %+v", reps[0])
	}
	if ok, _ := m.Exist(slot); ok {
		t.Fatal("a slot is visible")
	}
	if _, gone, err := m.PutCommit("other", "key1", slot, 7, ReplicateConfig{}, false); !gone || err != nil {
		t.Fatalf("commit of another client's slot: gone=%v err=%v", gone, err)
	}
	if _, gone, err := m.PutCommit("w", "key1", slot, 7, ReplicateConfig{}, false); gone || err != nil {
		t.Fatalf("commit: gone=%v err=%v", gone, err)
	}
	info, err := m.GetReplicaList("key1")
	if err != nil || info.CRC != 7 || info.Size != 100 || info.Replicas[0].Addr != reps[0].Addr || info.Replicas[0].Seq != reps[0].Seq {
		t.Fatalf("committed object %+v, %v", info, err)
	}
	if st := m.Stats(); st.IncompleteObjects != 0 || st.Objects != 1 || st.Puts != 1 {
		t.Fatalf("stats after commit %+v", st)
	}
	// A slot commits once; an unknown slot is gone.
	if _, gone, _ := m.PutCommit("w", "key2", slot, 7, ReplicateConfig{}, false); !gone {
		t.Fatal("a slot committed twice")
	}
}

// The key's rules refuse a commit as they refuse a put; the slot is freed
// and its header returned for zeroing (durable), so a refused put's header
// never outlives the call.
func TestPutSlotRefusals(t *testing.T) {
	m, clk := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	mustPut(t, m, "k", 100, ReplicateConfig{})
	for _, tc := range []struct {
		name   string
		upsert bool
		want   error
		prep   func()
	}{
		{"exists", false, ErrObjectExists, nil},
		{"in progress", true, ErrObjectExists, func() {
			m.Remove("k", true)
			if _, err := m.PutStart("x", "k", 100, ReplicateConfig{}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		if tc.prep != nil {
			tc.prep()
		}
		used := m.Stats().Used
		slot, reps := reserve(t, m, "w", 100, "k")
		tombs, gone, err := m.PutCommit("w", "k", slot, 9, ReplicateConfig{}, tc.upsert)
		if !errors.Is(err, tc.want) || gone {
			t.Fatalf("%s: err=%v gone=%v, want %v", tc.name, err, gone, tc.want)
		}
		if len(tombs) != 1 || tombs[0].Addr != reps[0].Addr-reps[0].HeaderLen || tombs[0].Seq != reps[0].Seq {
			t.Fatalf("%s: tombstones %+v for slot %+v", tc.name, tombs, reps[0])
		}
		m.Heartbeat("client-a", tombs) // the header zeroed; named to w, its bytes stay fenced
		if got := m.Stats().Used; got != used+m.Config().Align {
			t.Fatalf("%s: used %d after the refused slot's header was zeroed, %d before", tc.name, got, used)
		}
		clk.Advance(objheader.ZeroFence)
		m.Heartbeat("client-a", nil) // the fence over: the slot's space is free again
		if got := m.Stats().Used; got != used {
			t.Fatalf("%s: used %d after the refused slot, %d before", tc.name, got, used)
		}
	}
}

// A slot older than a version of its key is gone: the put is made the
// usual way, so the newest sequence number stays the acknowledged value.
func TestPutSlotOlderThanKey(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	slot, _ := reserve(t, m, "w", 100, "k")
	mustPut(t, m, "k", 100, ReplicateConfig{}) // newer than the slot
	tombs, gone, err := m.PutCommit("w", "k", slot, 9, ReplicateConfig{}, true)
	if !gone || err != nil || len(tombs) != 1 {
		t.Fatalf("commit of an older slot: gone=%v err=%v tombs=%v", gone, err, tombs)
	}
	if info, _ := m.Query("k"); info.CRC != 42 {
		t.Fatalf("the newer version was replaced: %+v", info)
	}
	// Removed, its tombstone not zeroed yet: still newer than a slot
	// reserved before the removal.
	slot, _ = reserve(t, m, "w", 100, "k2")
	mustPut(t, m, "k2", 100, ReplicateConfig{})
	if _, err := m.RemoveHeaders("k2", false); err != nil {
		t.Fatal(err)
	}
	if _, gone, _ := m.PutCommit("w", "k2", slot, 9, ReplicateConfig{}, true); !gone {
		t.Fatal("a slot older than a removed version committed")
	}
	// A header sized for another key length is gone too.
	slot, _ = reserve(t, m, "w", 100, "short")
	if _, gone, _ := m.PutCommit("w", strings.Repeat("x", 100), slot, 9, ReplicateConfig{}, true); !gone {
		t.Fatal("a slot committed under a key of another header length")
	}
}

// Upserting through a slot replaces the old version, which is freed; a
// newer slot may follow while the old version's tombstone is not zeroed.
func TestPutSlotUpsertChain(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	mustPut(t, m, "k", 100, ReplicateConfig{})
	for i := range 5 {
		slot, reps := reserve(t, m, "w", 100, "k")
		if _, gone, err := m.PutCommit("w", "k", slot, uint32(i), ReplicateConfig{}, true); gone || err != nil {
			t.Fatalf("upsert %d: gone=%v err=%v", i, gone, err)
		}
		if info, _ := m.Query("k"); info.CRC != uint32(i) || info.Replicas[0].Addr != reps[0].Addr {
			t.Fatalf("upsert %d: %+v", i, info)
		}
	}
	if st := m.Stats(); st.Objects != 1 || st.IncompleteObjects != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Slots are unfinished puts: a dropped client's slots are freed.
func TestPutSlotFreedWithOwner(t *testing.T) {
	m, clk := newTestMaster(t, Config{ClientTTL: time.Second}, map[string]uint64{"a": 1 << 20})
	m.Heartbeat("w", nil)
	used := m.Stats().Used
	reserve(t, m, "w", 4096, "k")
	if m.Stats().Used <= used {
		t.Fatal("a slot took no space")
	}
	for range 40 {
		clk.Advance(time.Second)
		m.Heartbeat("client-a", nil)
		m.Tick()
	}
	if st := m.Stats(); st.Used != used || st.IncompleteObjects != 0 {
		t.Fatalf("slot of a dropped client kept: %+v", st)
	}
}
