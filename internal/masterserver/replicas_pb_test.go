package masterserver

import (
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// replicasIntoPB fills the caller's room when the replicas fit in it and
// makes its own when not; either way every replica is listed.
func TestReplicasIntoPB(t *testing.T) {
	rs := []master.Replica{{Segment: "a", Endpoint: "ea", Addr: 1, Size: 10}, {Segment: "b", Endpoint: "eb", Addr: 2, Size: 10}}
	var ptrs [1]*pb.Replica
	var recs [1]pb.Replica
	one := replicasIntoPB(ptrs[:], recs[:], rs[:1])
	if len(one) != 1 || one[0] != &recs[0] || recs[0].Segment != "a" || recs[0].Addr != 1 {
		t.Fatalf("one replica in room for one: %v", one)
	}
	two := replicasIntoPB(ptrs[:], recs[:], rs)
	if len(two) != 2 || two[0] == &recs[0] || two[0].Segment != "a" || two[1].Endpoint != "eb" || two[1].Addr != 2 || recs[0].Segment != "a" {
		t.Fatalf("two replicas with room for one: %v", two)
	}
}
