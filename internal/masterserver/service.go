package masterserver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	"github.com/kvcache-go/mooncake/internal/master"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/tenant"
)

// Service adapts the core to the gRPC MasterService. Application errors go
// into the (code, message) status of each response; gRPC errors are left to
// transport failures.
type Service struct {
	pb.UnimplementedMasterServiceServer
	m *master.Master
	// segTenant is the tenant that mounted each segment (tenants on):
	// only it, or an admin, may unmount it.
	segTenant sync.Map // segment name -> tenant name
	grants    *granter // nil: no data-path grants (grants.go)
}

// NewService wraps a core.
func NewService(m *master.Master) *Service { return &Service{m: m} }

var _ pb.MasterServiceServer = (*Service)(nil)

// okStatus is every answer's success status: shared, as answers are only
// encoded, never changed, once made.
var okStatus = &pb.Status{}

func status(err error) *pb.Status {
	if err == nil {
		return okStatus
	}
	return &pb.Status{Code: master.Code(err), Message: err.Error()}
}

func specFromPB(s *pb.Segment) master.SegmentSpec {
	if s == nil {
		return master.SegmentSpec{}
	}
	return master.SegmentSpec{Name: s.Name, Endpoint: s.Endpoint, Base: s.Base, Size: s.Size,
		DiskURL: s.DiskUrl, OffloadOnEvict: s.OffloadOnEvict, PromotionOnHit: s.PromotionOnHit}
}

func rcFromPB(c *pb.ReplicateConfig) master.ReplicateConfig {
	if c == nil {
		return master.ReplicateConfig{}
	}
	return master.ReplicateConfig{Replicas: int(c.Replicas), PreferredSegments: c.PreferredSegments, SoftPin: c.SoftPin,
		SoftPinTTL: msDuration(c.SoftPinTtlMs), HardPin: c.HardPin, PromoteSeq: c.PromoteSeq, KeepSoftPin: c.KeepSoftPin}
}

// maxWireMs bounds durations from the wire (about 34 years) so the
// conversion cannot overflow; larger values become -1 and fail validation.
const maxWireMs = 1 << 40

func msDuration(ms int64) time.Duration {
	if ms < 0 || ms > maxWireMs {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

func replicasToPB(rs []master.Replica) []*pb.Replica { return replicasIntoPB(nil, nil, rs) }

// replicasIntoPB is replicasToPB into out's and recs' room when they have
// it (a caller's allocation of its own).
func replicasIntoPB(out []*pb.Replica, recs []pb.Replica, rs []master.Replica) []*pb.Replica {
	if len(out) < len(rs) || len(recs) < len(rs) {
		out = make([]*pb.Replica, len(rs))
		recs = make([]pb.Replica, len(rs)) // one allocation for the records
	}
	out = out[:len(rs)]
	for i, r := range rs {
		recs[i].Segment, recs[i].Endpoint, recs[i].Addr, recs[i].Size = r.Segment, r.Endpoint, r.Addr, r.Size
		out[i] = &recs[i]
	}
	return out
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func infoToPB(ns string, info master.ObjectInfo, err error) *pb.ObjectInfo {
	if err != nil {
		return &pb.ObjectInfo{Status: status(err)}
	}
	return &pb.ObjectInfo{Status: status(nil), Key: unscope(ns, info.Key), Size: info.Size, Crc32C: info.CRC, Replicas: replicasToPB(info.Replicas),
		LeaseTtlMs: info.LeaseTTL.Milliseconds(), Complete: info.Complete, CreatedUnixMs: unixMs(info.Created),
		LastAccessUnixMs: unixMs(info.LastAccess), LeaseUntilUnixMs: unixMs(info.LeaseUntil),
		SoftPinUntilUnixMs: unixMs(info.SoftPinUntil), HardPin: info.HardPin, Disk: diskToPB(info.Disk), Promote: info.Promote,
		View: info.View, Seq: info.Seq, Unchanged: info.Unchanged}
}

func diskToPB(ds []master.DiskCopy) []*pb.DiskCopy {
	if len(ds) == 0 {
		return nil
	}
	out := make([]*pb.DiskCopy, len(ds))
	for i, d := range ds {
		out[i] = &pb.DiskCopy{Url: d.URL, Seq: d.Seq, Segment: d.Segment, Endpoint: d.Endpoint, Addr: d.Addr}
	}
	return out
}

func heldFromPB(hs []*pb.HeldObject) []master.HeldObject {
	out := make([]master.HeldObject, len(hs))
	for i, h := range hs {
		out[i] = master.HeldObject{Segment: h.Segment, Offset: h.Offset, Key: h.Key, Size: h.Size, CRC: h.Crc32C, Seq: h.Seq,
			HardPin: h.HardPin, SoftPin: h.SoftPin, SoftPinTTL: msDuration(h.SoftPinTtlMs), Disk: h.Disk}
	}
	return out
}

func heldToPB(hs []master.HeldObject) []*pb.HeldObject {
	if len(hs) == 0 {
		return nil
	}
	out := make([]*pb.HeldObject, len(hs))
	for i, h := range hs {
		out[i] = &pb.HeldObject{Segment: h.Segment, Key: h.Key, Seq: h.Seq, Size: h.Size, Disk: h.Disk}
	}
	return out
}

func refsToPB(rs []master.HeaderRef) []*pb.HeaderRef {
	if len(rs) == 0 {
		return nil
	}
	out := make([]*pb.HeaderRef, len(rs))
	all := make([]pb.HeaderRef, len(rs)) // one allocation: a ping answer lists up to 16,384
	for i, r := range rs {
		h := &all[i]
		h.Segment, h.Endpoint, h.Offset, h.Addr, h.Seq, h.Offload = r.Segment, r.Endpoint, r.Offset, r.Addr, r.Seq, r.Offload
		out[i] = h
	}
	return out
}

func refsFromPB(rs []*pb.HeaderRef) []master.HeaderRef {
	out := make([]master.HeaderRef, len(rs))
	for i, r := range rs {
		out[i] = master.HeaderRef{Segment: r.Segment, Endpoint: r.Endpoint, Offset: r.Offset, Addr: r.Addr, Seq: r.Seq}
	}
	return out
}

func extentsToPB(xs []master.ScrubRef) []*pb.Extent {
	if len(xs) == 0 {
		return nil
	}
	out := make([]*pb.Extent, len(xs))
	all := make([]pb.Extent, len(xs))
	for i, x := range xs {
		all[i].Segment, all[i].Offset, all[i].Length = x.Segment, x.Offset, x.Length
		out[i] = &all[i]
	}
	return out
}

func extentsFromPB(xs []*pb.Extent) []master.ScrubRef {
	out := make([]master.ScrubRef, len(xs))
	for i, x := range xs {
		out[i] = master.ScrubRef{Segment: x.Segment, Offset: x.Offset, Length: x.Length}
	}
	return out
}

// Ping implements MasterService.
//
// With tenants, a caller reports zeroed headers and extents, and is told
// those to zero, only of segments its tenant mounted: another tenant
// naming a node's client id can neither free its unzeroed space nor learn
// where it lies.
func (s *Service) Ping(ctx context.Context, r *pb.PingRequest) (*pb.PingResponse, error) {
	t := callerOf(ctx)
	own := func(seg string) bool { return s.ownsSegment(t, seg) }
	v, st, todo := s.m.Heartbeat(r.ClientId, refsFromPB(filterOwn(r.Zeroed, (*pb.HeaderRef).GetSegment, own)))
	todo = filterOwn(todo, func(h master.HeaderRef) string { return h.Segment }, own)
	out := &pb.PingResponse{Status: status(nil), ViewVersion: v, NeedRemount: st == master.PingNeedRemount, Tombstones: refsToPB(todo)}
	if st == master.PingOK {
		scrub := s.m.Scrub(r.ClientId, extentsFromPB(filterOwn(r.Scrubbed, (*pb.Extent).GetSegment, own)))
		out.Scrub = extentsToPB(filterOwn(scrub, func(x master.ScrubRef) string { return x.Segment }, own))
		out.DiskRemove = heldToPB(s.m.DiskSync(r.ClientId, heldFromPB(ownHeld(t, r.OnDisk)), heldFromPB(ownHeld(t, r.DiskDropped))))
	}
	return out, nil
}

// ownsSegment reports whether t may act for segment name: an admin or a
// caller of a cooperative policy (which could name any tenant anyway)
// always, a tenant for the segments it mounted.
func (s *Service) ownsSegment(t *tenant.Tenant, name string) bool {
	if !bound(t) {
		return true
	}
	owner, _ := s.segTenant.Load(name)
	return owner == t.Name
}

// mountable reports whether t may mount segment name: not while another
// tenant holds a segment of that name (mounting it again under a new
// client id would unmount the holder's, with its objects).
func (s *Service) mountable(t *tenant.Tenant, name string) error {
	if !bound(t) {
		return nil
	}
	if owner, ok := s.segTenant.Load(name); ok && owner != t.Name {
		return fmt.Errorf("%w: %q is another tenant's", master.ErrSegmentExists, name)
	}
	return nil
}

// filterOwn keeps the items whose segment (seg) own allows; xs when it
// allows them all (no copy).
func filterOwn[T any](xs []T, seg func(T) string, own func(string) bool) []T {
	for i, x := range xs {
		if !own(seg(x)) {
			out := append(xs[:i:i], xs[i+1:]...)
			return slices.DeleteFunc(out, func(x T) bool { return !own(seg(x)) })
		}
	}
	return xs
}

// MountSegment implements MasterService.
func (s *Service) MountSegment(ctx context.Context, r *pb.MountSegmentRequest) (*pb.Status, error) {
	caller := callerOf(ctx)
	if err := s.clientFree(caller, r.ClientId); err != nil {
		return status(err), nil
	}
	if err := s.mountable(caller, r.Segment.GetName()); err != nil {
		return status(err), nil
	}
	if err := s.grants.checkMount(r.Proof, r.ClientId, r.Segment); err != nil {
		return status(err), nil
	}
	err := s.m.MountSegment(r.ClientId, specFromPB(r.Segment))
	if err == nil {
		s.segTenant.Store(r.Segment.GetName(), caller.Name)
		s.bindClient(caller, r.ClientId)
	}
	return status(err), nil
}

// clientFree refuses a tenant's call that registers, remounts or forgets
// the client id of another tenant's client (bound when that tenant
// registered it: bindClient): it would drop that client's restore, or
// make the master forget it. Callers without a namespace (the raw key
// space, admins) act on any client.
func (s *Service) clientFree(t *tenant.Tenant, clientID string) error {
	if bound(t) && !s.m.ClientFree(clientID, t.Namespace) {
		return fmt.Errorf("%w: client id %q is in use", master.ErrInvalidParams, clientID)
	}
	return nil
}

// bindClient binds clientID, which t just registered, to t's namespace.
func (s *Service) bindClient(t *tenant.Tenant, clientID string) {
	if bound(t) {
		s.m.BindClient(clientID, t.Namespace)
	}
}

// RemountSegments implements MasterService: one call of a restore session
// (see RemountSegmentsRequest). The first call (RestoreId 0) opens it with
// the segments (sized by Total) and answers the window of chunks the
// client may send ahead; every call decides its chunk of objects in chunk
// order (a chunk ahead waits for its turn, within its call's deadline and
// at most a client TTL per chunk of the window), and the call without More
// closes it.
func (s *Service) RemountSegments(ctx context.Context, r *pb.RemountSegmentsRequest) (*pb.RemountSegmentsResponse, error) {
	caller := callerOf(ctx)
	if err := s.clientFree(caller, r.ClientId); err != nil {
		return &pb.RemountSegmentsResponse{Status: status(err)}, nil
	}
	for i, sg := range r.Segments {
		if err := s.mountable(caller, sg.GetName()); err != nil {
			return &pb.RemountSegmentsResponse{Status: status(err)}, nil
		}
		var proof []byte
		if i < len(r.Proofs) {
			proof = r.Proofs[i]
		}
		if err := s.grants.checkMount(proof, r.ClientId, sg); err != nil {
			return &pb.RemountSegmentsResponse{Status: status(err)}, nil
		}
	}
	for _, sg := range r.Segments {
		s.segTenant.Store(sg.GetName(), caller.Name)
	}
	r.Objects = ownHeld(caller, r.Objects)
	ctx, cancel := context.WithTimeout(ctx, s.m.Config().ClientTTL*master.RestoreWindow) // a chunk waits for those before it
	defer cancel()
	id := r.RestoreId
	if id == 0 {
		specs := make([]master.SegmentSpec, len(r.Segments))
		for i, sg := range r.Segments {
			specs[i] = specFromPB(sg)
		}
		var err error
		if id, err = s.m.RestoreBeginFresh(r.ClientId, specs, r.Fresh); err != nil {
			return &pb.RemountSegmentsResponse{Status: status(err)}, nil
		}
		s.bindClient(caller, r.ClientId)
		if r.Total > 0 {
			if err := s.m.RestoreExpect(r.ClientId, id, r.Total); err != nil {
				return &pb.RemountSegmentsResponse{Status: status(err)}, nil
			}
		}
	}
	res, err := s.m.RestoreChunkContext(ctx, r.ClientId, id, r.Chunk, heldFromPB(r.Objects))
	if err == nil && !r.More {
		var end master.RestoreResult
		end, err = s.m.RestoreEndContext(ctx, r.ClientId, id)
		res.Restored, res.Dropped = res.Restored+end.Restored, res.Dropped+end.Dropped
		res.Tombstones = append(res.Tombstones, end.Tombstones...)
	}
	out := &pb.RemountSegmentsResponse{Status: status(err), Restored: int64(res.Restored), Dropped: int64(res.Dropped),
		Tombstones: refsToPB(res.Tombstones)}
	if err == nil && r.More && r.RestoreId == 0 {
		out.RestoreId, out.Window = id, master.RestoreWindow
	} else if err == nil && r.More {
		out.RestoreId = id
	}
	return out, nil
}

// UnmountSegment implements MasterService.
func (s *Service) UnmountSegment(ctx context.Context, r *pb.UnmountSegmentRequest) (*pb.Status, error) {
	if t := callerOf(ctx); t.Namespace != "" {
		if owner, _ := s.segTenant.Load(r.Name); owner != t.Name {
			return status(fmt.Errorf("%w: %q", master.ErrSegmentNotFound, r.Name)), nil
		}
	}
	var err error
	if r.GraceMs > 0 {
		grace := min(time.Duration(min(r.GraceMs, maxWireMs))*time.Millisecond, time.Hour)
		err = s.m.GracefulUnmount(r.ClientId, r.Name, grace)
	} else {
		err = s.m.UnmountSegment(r.ClientId, r.Name)
	}
	if err == nil {
		s.segTenant.Delete(r.Name)
	}
	return status(err), nil
}

// Leave implements MasterService: a closing client without segments is
// forgotten at once. It needs no secret: a client forgotten while alive is
// told to remount by its next ping and registers again. Another tenant's
// client is left alone (answered as an unknown one).
func (s *Service) Leave(ctx context.Context, r *pb.LeaveRequest) (*pb.Status, error) {
	if r.ClientId == "" {
		return status(fmt.Errorf("%w: empty client id", master.ErrInvalidParams)), nil
	}
	if s.clientFree(callerOf(ctx), r.ClientId) != nil {
		return status(nil), nil
	}
	s.m.Leave(r.ClientId)
	return status(nil), nil
}

func (s *Service) putStart(ns string, r *pb.PutStartRequest) *pb.PutStartResponse {
	var reps []master.Replica
	var err error
	key := scope(ns, r.Key)
	if r.Upsert {
		reps, err = s.m.Upsert(r.ClientId, key, r.Size, rcFromPB(r.Config))
	} else {
		reps, err = s.m.PutStart(r.ClientId, key, r.Size, rcFromPB(r.Config))
	}
	out := &pb.PutStartResponse{Status: status(err), Replicas: replicasToPB(reps), KeyPrefix: ns}
	if len(reps) > 0 {
		out.Seq, out.HeaderLen = reps[0].Seq, reps[0].HeaderLen
	}
	return s.grants.put(out)
}

// PutStart implements MasterService.
func (s *Service) PutStart(ctx context.Context, r *pb.PutStartRequest) (*pb.PutStartResponse, error) {
	return s.putStart(callerOf(ctx).Namespace, r), nil
}

// BatchPutStart implements MasterService.
func (s *Service) BatchPutStart(ctx context.Context, r *pb.BatchPutStartRequest) (*pb.BatchPutStartResponse, error) {
	ns := callerOf(ctx).Namespace
	out := &pb.BatchPutStartResponse{Results: make([]*pb.PutStartResponse, len(r.Puts))}
	for i, p := range r.Puts {
		out.Results[i] = s.putStart(ns, p)
	}
	return out, nil
}

// PutCommit implements MasterService: the end of a put (the key's own put
// in progress, or a slot written before), then, when asked and the put
// went through, a slot for the client's next put.
func (s *Service) PutCommit(ctx context.Context, r *pb.PutCommitRequest) (*pb.PutCommitResponse, error) {
	return s.putCommit(callerOf(ctx).Namespace, r), nil
}

func (s *Service) putCommit(ns string, r *pb.PutCommitRequest) *pb.PutCommitResponse {
	// The answer, the next slot's record and its replica (one, as a rule)
	// in one allocation.
	both := &struct {
		out  pb.PutCommitResponse
		next pb.PutStartResponse
		rep  [1]*pb.Replica
		rec  [1]pb.Replica
	}{}
	out := &both.out
	rc := rcFromPB(r.Config)
	key := scope(ns, r.Key)
	var ask master.SlotAsk
	keyLen := r.ReserveKeyLen + uint64(len(ns)) // the slot's header carries the namespace too
	if r.ReserveSize > 0 && r.ReserveKeyLen > 0 && keyLen <= uint64(s.m.Config().MaxKeyLen) {
		ask = master.SlotAsk{Size: r.ReserveSize, KeyLen: int(keyLen)}
	}
	c := s.m.CommitNext(r.ClientId, key, r.Slot, r.Crc32C, rc, r.Upsert, ask)
	out.Status, out.SlotGone = status(c.Err), c.Gone
	if len(c.Tombs) > 0 {
		out.Tombstones = s.grants.tombs(refsToPB(c.Tombs))
	}
	if c.Slot != "" && len(c.Next) > 0 {
		out.NextSlot = c.Slot
		n := &both.next
		n.Status, n.Replicas, n.Seq, n.HeaderLen, n.KeyPrefix = status(nil), replicasIntoPB(both.rep[:], both.rec[:], c.Next), c.Next[0].Seq, c.Next[0].HeaderLen, ns
		out.Next = s.grants.put(n)
	}
	return out
}

// BatchPutCommit implements MasterService: PutCommit of each put, in order.
func (s *Service) BatchPutCommit(ctx context.Context, r *pb.BatchPutCommitRequest) (*pb.BatchPutCommitResponse, error) {
	ns := callerOf(ctx).Namespace
	out := &pb.BatchPutCommitResponse{Results: make([]*pb.PutCommitResponse, len(r.Commits))}
	keys := make([]string, len(r.Commits))
	for i, e := range r.Commits {
		out.Results[i] = s.putCommit(ns, e)
		keys[i] = scope(ns, e.Key)
	}
	s.m.TouchChains(keys) // one batch of a chain's blocks: one recency group
	return out, nil
}

// PutRevoke implements MasterService.
func (s *Service) PutRevoke(ctx context.Context, r *pb.PutRevokeRequest) (*pb.Status, error) {
	return status(s.m.PutRevoke(r.ClientId, scope(callerOf(ctx).Namespace, r.Key))), nil
}

// GetReplicaList implements MasterService.
func (s *Service) GetReplicaList(ctx context.Context, r *pb.KeyRequest) (*pb.ObjectInfo, error) {
	return s.getReplicaList(callerOf(ctx).Namespace, r), nil
}

func (s *Service) getReplicaList(ns string, r *pb.KeyRequest) *pb.ObjectInfo {
	info, err := s.m.GetReplicaListIf(scope(ns, r.Key), r.CachedView, r.CachedSeq)
	return s.grants.info(infoToPB(ns, info, err))
}

// BatchGetReplicaList implements MasterService.
func (s *Service) BatchGetReplicaList(ctx context.Context, r *pb.BatchKeysRequest) (*pb.BatchObjectInfo, error) {
	ns := callerOf(ctx).Namespace
	keys := scopeKeys(ns, r.Keys)
	out := &pb.BatchObjectInfo{Results: make([]*pb.ObjectInfo, len(keys))}
	for i, k := range keys {
		var seq uint64 // the version the client's hot cache holds (0: none)
		if len(r.CachedSeqs) == len(keys) {
			seq = r.CachedSeqs[i]
		}
		info, err := s.m.GetReplicaListIf(k, r.CachedView, seq)
		out.Results[i] = s.grants.info(infoToPB(ns, info, err))
	}
	s.m.TouchChains(keys)
	return out, nil
}

// Query implements MasterService.
func (s *Service) Query(ctx context.Context, r *pb.KeyRequest) (*pb.ObjectInfo, error) {
	ns := callerOf(ctx).Namespace
	info, err := s.m.Query(scope(ns, r.Key))
	return infoToPB(ns, info, err), nil
}

// Exist implements MasterService.
func (s *Service) Exist(ctx context.Context, r *pb.KeyRequest) (*pb.ExistResponse, error) {
	ok, err := s.m.Exist(scope(callerOf(ctx).Namespace, r.Key))
	return &pb.ExistResponse{Status: status(err), Exists: ok}, nil
}

// BatchExist implements MasterService.
func (s *Service) BatchExist(ctx context.Context, r *pb.BatchKeysRequest) (*pb.BatchExistResponse, error) {
	keys := scopeKeys(callerOf(ctx).Namespace, r.Keys)
	out := &pb.BatchExistResponse{Results: make([]*pb.ExistResponse, len(keys))}
	okStatus := status(nil) // shared: the answer is only marshalled
	for i, ok := range s.m.BatchExist(keys) {
		st := okStatus
		if err := s.m.CheckKey(keys[i]); err != nil {
			st = status(err)
		}
		out.Results[i] = &pb.ExistResponse{Status: st, Exists: ok}
	}
	return out, nil
}

// batchExistBits answers fastrpc's FastBatchExistBits: one byte per key,
// 1 when it exists (invalid keys read 0).
func (s *Service) batchExistBits(ns string, payload []byte) ([]byte, uint8) {
	var r pb.BatchKeysRequest
	if err := pb.UnmarshalRequest(payload, &r); err != nil {
		return []byte(err.Error()), fastrpc.StatusBadRequest
	}
	out := make([]byte, len(r.Keys))
	for i, ok := range s.m.BatchExist(scopeKeys(ns, r.Keys)) {
		if ok {
			out[i] = 1
		}
	}
	return out, fastrpc.StatusOK
}

// Remove implements MasterService.
func (s *Service) Remove(ctx context.Context, r *pb.RemoveRequest) (*pb.RemoveResponse, error) {
	tombs, err := s.m.RemoveHeaders(scope(callerOf(ctx).Namespace, r.Key), r.Force)
	return &pb.RemoveResponse{Status: status(err), Tombstones: s.grants.tombs(refsToPB(tombs))}, nil
}

// BatchRemove implements MasterService.
func (s *Service) BatchRemove(ctx context.Context, r *pb.BatchRemoveRequest) (*pb.BatchRemoveResponse, error) {
	ns := callerOf(ctx).Namespace
	out := &pb.BatchRemoveResponse{Results: make([]*pb.Status, len(r.Removes))}
	for i, rm := range r.Removes {
		tombs, err := s.m.RemoveHeaders(scope(ns, rm.Key), rm.Force)
		out.Results[i] = status(err)
		if room := maxReplyTombstones - len(out.Tombstones); room > 0 { // the nodes zero the rest
			out.Tombstones = append(out.Tombstones, s.grants.tombs(refsToPB(tombs[:min(room, len(tombs))]))...)
		}
	}
	return out, nil
}

// RemoveByRegex implements MasterService: one chunk when paged, else every
// chunk (see removePages).
func (s *Service) RemoveByRegex(ctx context.Context, r *pb.RemoveByRegexRequest) (*pb.CountResponse, error) {
	mt, err := master.RegexMatcher(r.Pattern)
	if err != nil {
		return &pb.CountResponse{Status: status(err)}, nil
	}
	return s.removePages(callerOf(ctx).Namespace, mt, r.Force, r.Paged, r.After, r.Limit), nil
}

// RemoveAll implements MasterService as RemoveByRegex does.
func (s *Service) RemoveAll(ctx context.Context, r *pb.RemoveAllRequest) (*pb.CountResponse, error) {
	return s.removePages(callerOf(ctx).Namespace, master.AllMatcher, r.Force, r.Paged, r.After, r.Limit), nil
}

// maxReplyTombstones bounds the tombstones of an unpaged bulk removal's
// answer (~60 bytes each on the wire, far below gRPC's 4 MiB): the nodes
// zero the others when their heartbeats bring them.
const maxReplyTombstones = 16 * 1024

// removePages runs one chunk of a bulk removal (paged) or all of them, the
// answer bounded either way.
// A tenant's removal walks its own namespace only (scopeMatcher), its
// cursors being keys as the tenant knows them.
func (s *Service) removePages(ns string, mt master.Matcher, force, paged bool, after string, limit int32) *pb.CountResponse {
	if limit < 0 {
		return &pb.CountResponse{Status: &pb.Status{Code: master.CodeInvalidParams, Message: "negative limit"}}
	}
	mt = scopeMatcher(ns, mt)
	if after != "" {
		after = scope(ns, after)
	}
	if paged {
		p := s.m.RemovePageFrom(mt, force, after, int(limit))
		next := p.Next
		if next != "" {
			next = unscope(ns, next)
		}
		return &pb.CountResponse{Status: status(nil), Count: int64(p.Removed), Tombstones: s.grants.tombs(refsToPB(p.Tombstones)), Next: next}
	}
	out := &pb.CountResponse{Status: status(nil)}
	for {
		p := s.m.RemovePageFrom(mt, force, after, master.RemoveChunk)
		out.Count += int64(p.Removed)
		if room := maxReplyTombstones - len(out.Tombstones); room > 0 {
			out.Tombstones = append(out.Tombstones, s.grants.tombs(refsToPB(p.Tombstones[:min(room, len(p.Tombstones))]))...)
		}
		if p.Next == "" {
			return out
		}
		after = p.Next
	}
}

// List implements MasterService.
func (s *Service) List(ctx context.Context, r *pb.ListRequest) (*pb.ListResponse, error) {
	if r.Limit < 0 || r.Limit > 100000 {
		return &pb.ListResponse{Status: &pb.Status{Code: master.CodeInvalidParams, Message: "limit not in [0,100000]"}}, nil
	}
	ns := callerOf(ctx).Namespace
	after := r.After
	if after != "" {
		after = scope(ns, after)
	}
	keys, next := s.m.List(scope(ns, r.Prefix), after, int(r.Limit))
	if next != "" {
		next = unscope(ns, next)
	}
	out := &pb.ListResponse{Status: status(nil), Next: next, Keys: make([]*pb.KeyInfo, len(keys))}
	for i, k := range keys {
		out.Keys[i] = &pb.KeyInfo{Key: unscope(ns, k.Key), Size: k.Size, Replicas: int32(k.Replicas)}
	}
	return out, nil
}

// QuerySegment implements MasterService: with a client id, that client's
// segment of the name.
//
// With tenants, the client id of another tenant's segment is not told (it
// is no credential, but nothing a tenant needs either).
func (s *Service) QuerySegment(ctx context.Context, r *pb.SegmentRequest) (*pb.SegmentInfo, error) {
	si, err := s.m.Segment(r.Name)
	if r.ClientId != "" {
		si, err = s.m.ClientSegment(r.ClientId, r.Name)
	}
	if err != nil {
		return &pb.SegmentInfo{Status: status(err)}, nil
	}
	client := si.Client
	if !s.ownsSegment(callerOf(ctx), r.Name) {
		client = ""
	}
	return &pb.SegmentInfo{Status: status(nil), Segment: &pb.Segment{Name: si.Name, Endpoint: si.Endpoint, Base: si.Base, Size: si.Size},
		ClientId: client, Used: si.Used, Capacity: si.Capacity, Objects: int64(si.Objects), Draining: si.Draining}, nil
}
