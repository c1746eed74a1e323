package masterserver

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/objheader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// Data-path grants (ServerConfig.Grants): the master signs, at the wire
// conversion, a grant for exactly the extents it hands out, so a storage
// node that checks grants lets the client touch those bytes and nothing
// else. The core knows nothing of it.
//
//   - Placements (PutStart, the slot of a PutCommit): WRITE on the header
//     and value, [addr-header_len, addr+size), for PutTimeout: an
//     unfinished put older than that may be preempted, and the space of an
//     unfinished put is not reused before PutReleaseTimeout.
//   - Replica lists (GetReplicaList, BatchGetReplicaList): READ on
//     [addr, addr+size) until the read lease the call granted ends: a
//     leased object is neither evicted nor removed (unless forced), so the
//     extent cannot be reallocated while the grant is valid.
//   - Disk copies in replica lists: READ on the value's address range in
//     the node's disk range for diskGrantTTL. No lease holds a disk copy,
//     but its range is never given to another value while the tier is
//     open (a new version takes a new range) and a reopened tier starts
//     its ranges at a random point of a 2^60-byte span: a grant that
//     outlives its copy names nothing.
//   - Tombstones handed to the remover: WRITE on the header, for
//     headerGrantTTL.
//   - Tasks: READ on the source, WRITE on the targets, until the task's
//     deadline (exactly: not rounded like the others).
//
// The same extent and mode get the same grant, byte for byte, for a
// while: a grant's expiry is the wanted one rounded down to a step (a
// power of two milliseconds, at most half the wanted lifetime for READ, a
// quarter for WRITE) and its nonce is derived from the rest, so every call
// within one step signs the same bytes: a hot object's readers get the
// same grant, which a lane sends once and the node verifies once per
// lane; a put slot made of an upsert's replaced version (the same extent
// again) gets the grant its earlier put had, which the lane that sent it
// does not send again. Nothing is cached: signing is a MAC over some 60
// bytes with the keyring's state, cheaper than a look-up in a table of
// every hot extent, which a pool's working set of millions of objects
// keeps out of the processor's caches, and it takes no lock. Rounding
// only shortens a grant, never past half (READ) or three quarters
// (WRITE) of its wanted lifetime. Tombstones' header grants and tasks' grants are signed
// fresh, with a random nonce and the wanted expiry (rarely the same
// extent twice; a task may take most of its time).
//
// Revocation is by expiry. The bound: a WRITE grant outlives the removal
// (or revocation) of its put by at most PutTimeout; a READ grant outlives
// its object only after a forced removal, by at most the lease.
//
// Expiry is wall-clock time (the storage node checks it against its own
// clock): the core's lease, on the core's clock, is converted as a
// duration from now. Clocks of the master and the nodes must agree to well
// within the lease TTL.

// headerGrantTTL bounds a tombstone's header grant.
const headerGrantTTL = 5 * time.Second

// diskGrantTTL bounds a disk copy's read grant.
const diskGrantTTL = 10 * time.Second

type granter struct {
	keys   *grant.Keyring
	clock  clock.Clock // the core's
	putTTL time.Duration
	seed   maphash.Seed // of the nonces: this master's own
}

// newGranter returns nil (no grants) without keys.
func newGranter(keys *grant.Keyring, c clock.Clock, putTTL time.Duration) *granter {
	if keys == nil {
		return nil
	}
	return &granter{keys: keys, clock: clock.Or(c), putTTL: putTTL, seed: maphash.MakeSeed()}
}

// checkMount verifies the proof of mount of clientID's segment seg (nil
// granter: grants off, none needed).
func (g *granter) checkMount(proof []byte, clientID string, seg *pb.Segment) error {
	if g == nil {
		return nil
	}
	v := grant.NewVerifier(g.keys, g.clock.Now)
	if err := v.CheckMount(proof, clientID, seg.GetEndpoint(), seg.GetBase(), seg.GetSize()); err != nil {
		return fmt.Errorf("%w: segment %q: %w", master.ErrInvalidParams, seg.GetName(), err)
	}
	return nil
}

// sign returns the grant of mode on [addr, addr+n) of endpoint for a
// holder that wants it until expires: it expires at expires rounded down
// to the step of its lifetime at now (step), and every call for the same
// extent and mode that rounds to the same expiry gets the same bytes.
func (g *granter) sign(endpoint string, addr, n uint64, mode grant.Mode, now, expires time.Time) []byte {
	exp := expires
	if st := int64(step(expires.Sub(now), mode)); st > 0 {
		e := expires.UnixNano()
		exp = time.Unix(0, e-e%st) // Truncate divides in 128 bits, four times slower
	}
	nonce := maphash.String(g.seed, endpoint)
	for _, w := range [...]uint64{addr, n, uint64(exp.UnixNano()), uint64(mode)} {
		nonce = (nonce ^ w) * 0x9E3779B97F4A7C15
		nonce ^= nonce >> 32
	}
	return g.encode(endpoint, addr, n, mode, exp, nonce|1)
}

// step is the rounding step of a grant of mode wanted for lifetime: the
// largest power of two milliseconds not over half of it (READ) or a
// quarter (WRITE: a put slot is written up to slotMaxAge, 10 s, after it
// is reserved, and a large put's transfers take their time; a grant that
// expires first fails the put); 0 under 2 ms (not rounded).
func step(lifetime time.Duration, mode grant.Mode) time.Duration {
	most := lifetime / 2
	if mode&grant.Write != 0 {
		most = lifetime / 4
	}
	if most < time.Millisecond {
		return 0
	}
	return time.Millisecond << (bits.Len64(uint64(most/time.Millisecond)) - 1)
}

// coreNow is the core's clock at now (wall clock): now itself when the
// core runs on the real clock (no second read of it per call).
func (g *granter) coreNow(now time.Time) time.Time {
	if _, real := g.clock.(clock.Real); real {
		return now
	}
	return g.clock.Now()
}

// encode signs a grant of mode on [addr, addr+n) of endpoint until expires
// with nonce (0: a random one); nil for an empty extent or no endpoint.
func (g *granter) encode(endpoint string, addr, n uint64, mode grant.Mode, expires time.Time, nonce uint64) []byte {
	if n == 0 || endpoint == "" {
		return nil
	}
	b, err := g.keys.Encode(grant.Grant{Segment: endpoint, Addr: addr, Length: n, Mode: mode, Expires: expires, Nonce: nonce})
	if err != nil {
		return nil // a name too long for a grant: the node refuses the transfer
	}
	return b
}

// put grants WRITE on each placement's header and value.
func (g *granter) put(out *pb.PutStartResponse) *pb.PutStartResponse {
	if g == nil || out == nil {
		return out
	}
	now := time.Now()
	exp := now.Add(g.putTTL)
	for _, r := range out.Replicas {
		r.Grant = g.sign(r.Endpoint, r.Addr-out.HeaderLen, r.Size+out.HeaderLen, grant.Write, now, exp)
	}
	return out
}

// info grants READ on each replica until the lease the call granted ends.
func (g *granter) info(out *pb.ObjectInfo) *pb.ObjectInfo {
	if g == nil || out == nil {
		return out
	}
	now := time.Now()
	if len(out.Disk) > 0 {
		exp := now.Add(diskGrantTTL)
		for _, d := range out.Disk {
			if d.Addr != 0 {
				d.Grant = g.sign(d.Endpoint, d.Addr, out.Size, grant.Read, now, exp)
			}
		}
	}
	if out.LeaseUntilUnixMs == 0 {
		return out
	}
	left := time.UnixMilli(out.LeaseUntilUnixMs).Sub(g.coreNow(now))
	if left <= 0 {
		return out
	}
	exp := now.Add(left)
	for _, r := range out.Replicas {
		r.Grant = g.sign(r.Endpoint, r.Addr, r.Size, grant.Read, now, exp)
	}
	return out
}

// tombs grants WRITE on each tombstone's header.
func (g *granter) tombs(refs []*pb.HeaderRef) []*pb.HeaderRef {
	if g == nil {
		return refs
	}
	now := time.Now()
	exp := now.Add(headerGrantTTL)
	for _, r := range refs {
		r.Grant = g.encode(r.Endpoint, r.Addr, objheader.Align, grant.Write, exp, 0)
	}
	return refs
}

// task grants READ on a task's source and WRITE on its targets (headers
// included) until its deadline.
func (g *granter) task(a *pb.TaskAssignment) {
	if g == nil || a.DeadlineUnixMs == 0 {
		return
	}
	now := time.Now()
	left := time.UnixMilli(a.DeadlineUnixMs).Sub(g.coreNow(now))
	if left <= 0 {
		return
	}
	// Until the deadline itself, not rounded: a task is rare (nothing to
	// share bytes with) and may take most of its time.
	exp := now.Add(left)
	if s := a.Source; s != nil {
		s.Grant = g.encode(s.Endpoint, s.Addr-a.HeaderLen, s.Size+a.HeaderLen, grant.Read, exp, 0)
	}
	for _, t := range a.Targets {
		t.Grant = g.encode(t.Endpoint, t.Addr-a.HeaderLen, t.Size+a.HeaderLen, grant.Write, exp, 0)
	}
}
