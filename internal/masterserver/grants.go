package masterserver

import (
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/grant"
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
//     deadline.
//
// A signed grant is handed out again for the same segment, extent and
// mode while it expires no later than a fresh one would and has enough of
// the fresh one's lifetime left (granter.sign: half for READ, three
// quarters for WRITE): a hot object's readers get the same bytes, which
// the client sends once per lane and the node verifies once; a put slot
// made of an upsert's replaced version (the same extent again) gets the
// grant its earlier put had, which the node recalls instead of verifying.
// Tombstones' header grants are always fresh (short-lived, rarely the
// same header twice).
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

	// Signed grants by extent and mode, handed out again while they have
	// enough of the wanted lifetime left and expire no later than wanted.
	// Reuse never widens anything: the same segment, extent and mode, and
	// an expiry no later than a fresh grant's. In shards by address: every
	// put and get of every client looks here.
	shards [grantShards]grantShard
}

const grantShards = 16

type grantShard struct {
	mu    sync.Mutex
	cache map[grantKey]cachedGrant
	_     [48]byte // a cache line each
}

// shard is the shard of an extent.
func (g *granter) shard(addr, n uint64) *grantShard {
	return &g.shards[((addr^n)*0x9E3779B97F4A7C15)>>60%grantShards]
}

type grantKey struct {
	endpoint string
	addr, n  uint64
	mode     grant.Mode
}

type cachedGrant struct {
	b   []byte
	exp time.Time
}

// maxCachedGrants bounds the cache (some 200 B an entry: about 13 MiB at
// the bound), sized so that a pool's working set of tens of thousands of
// hot extents, each with a READ and a WRITE grant, stays in it; past it (in
// a shard), the expired entries are dropped and, if that is not enough,
// others down to three quarters of the bound.
const maxCachedGrants = 1 << 16

// newGranter returns nil (no grants) without keys.
func newGranter(keys *grant.Keyring, c clock.Clock, putTTL time.Duration) *granter {
	if keys == nil {
		return nil
	}
	g := &granter{keys: keys, clock: clock.Or(c), putTTL: putTTL}
	for i := range g.shards {
		g.shards[i].cache = map[grantKey]cachedGrant{}
	}
	return g
}

// sign returns a grant of mode on [addr, addr+n) of endpoint that expires
// at expires, or a cached one for the same extent and mode that expires no
// later and has enough of the lifetime left at now (reusable).
func (g *granter) sign(endpoint string, addr, n uint64, mode grant.Mode, now, expires time.Time) []byte {
	if n == 0 || endpoint == "" {
		return nil
	}
	k := grantKey{endpoint, addr, n, mode}
	sh := g.shard(addr, n)
	sh.mu.Lock()
	c, ok := sh.cache[k]
	sh.mu.Unlock()
	if ok && reusable(c.exp, now, expires, mode) {
		return c.b
	}
	b := g.encode(endpoint, addr, n, mode, expires)
	if b == nil {
		return nil
	}
	sh.mu.Lock()
	if len(sh.cache) >= maxCachedGrants/grantShards {
		for k, c := range sh.cache {
			if !now.Before(c.exp) {
				delete(sh.cache, k)
			}
		}
		for k := range sh.cache { // in no particular order
			if len(sh.cache) <= maxCachedGrants/grantShards*3/4 {
				break
			}
			delete(sh.cache, k)
		}
	}
	sh.cache[k] = cachedGrant{b, expires}
	sh.mu.Unlock()
	return b
}

// coreNow is the core's clock at now (wall clock): now itself when the
// core runs on the real clock (no second read of it per call).
func (g *granter) coreNow(now time.Time) time.Time {
	if _, real := g.clock.(clock.Real); real {
		return now
	}
	return g.clock.Now()
}

func (g *granter) encode(endpoint string, addr, n uint64, mode grant.Mode, expires time.Time) []byte {
	b, err := g.keys.Encode(grant.Grant{Segment: endpoint, Addr: addr, Length: n, Mode: mode, Expires: expires})
	if err != nil {
		return nil // a name too long for a grant: the node refuses the transfer
	}
	return b
}

// reusable reports whether a grant of mode expiring at exp may stand in,
// at now, for one expiring at want: not later, and at least half as long
// left (READ) or three quarters (WRITE: a put slot is written up to
// slotMaxAge, 10 s, after it is reserved, and a large put's transfers
// take their time; a grant that expires first fails the put).
func reusable(exp, now, want time.Time, mode grant.Mode) bool {
	left, full := exp.Sub(now), want.Sub(now)
	if mode&grant.Write != 0 {
		return !exp.After(want) && left >= full-full/4
	}
	return !exp.After(want) && left >= full/2
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
		if r.Endpoint != "" {
			r.Grant = g.encode(r.Endpoint, r.Addr, objheader.Align, grant.Write, exp)
		}
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
	exp := now.Add(left)
	if s := a.Source; s != nil {
		s.Grant = g.sign(s.Endpoint, s.Addr-a.HeaderLen, s.Size+a.HeaderLen, grant.Read, now, exp)
	}
	for _, t := range a.Targets {
		t.Grant = g.sign(t.Endpoint, t.Addr-a.HeaderLen, t.Size+a.HeaderLen, grant.Write, now, exp)
	}
}
