package masterserver

import (
	"context"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/master"
	"time"

	"github.com/kvcache-go/mooncake/internal/fastrpc"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// Service adapts the core to the gRPC MasterService. Application errors go
// into the (code, message) status of each response; gRPC errors are left to
// transport failures.
type Service struct {
	pb.UnimplementedMasterServiceServer
	m *master.Master
}

// NewService wraps a core.
func NewService(m *master.Master) *Service { return &Service{m: m} }

var _ pb.MasterServiceServer = (*Service)(nil)

func status(err error) *pb.Status {
	if err == nil {
		return &pb.Status{}
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

func replicasToPB(rs []master.Replica) []*pb.Replica {
	out := make([]*pb.Replica, len(rs))
	for i, r := range rs {
		out[i] = &pb.Replica{Segment: r.Segment, Endpoint: r.Endpoint, Addr: r.Addr, Size: r.Size}
	}
	return out
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func infoToPB(info master.ObjectInfo, err error) *pb.ObjectInfo {
	if err != nil {
		return &pb.ObjectInfo{Status: status(err)}
	}
	return &pb.ObjectInfo{Status: status(nil), Key: info.Key, Size: info.Size, Crc32C: info.CRC, Replicas: replicasToPB(info.Replicas),
		LeaseTtlMs: info.LeaseTTL.Milliseconds(), Complete: info.Complete, CreatedUnixMs: unixMs(info.Created),
		LastAccessUnixMs: unixMs(info.LastAccess), LeaseUntilUnixMs: unixMs(info.LeaseUntil),
		SoftPinUntilUnixMs: unixMs(info.SoftPinUntil), HardPin: info.HardPin, Disk: diskToPB(info.Disk), Promote: info.Promote}
}

func diskToPB(ds []master.DiskCopy) []*pb.DiskCopy {
	if len(ds) == 0 {
		return nil
	}
	out := make([]*pb.DiskCopy, len(ds))
	for i, d := range ds {
		out[i] = &pb.DiskCopy{Url: d.URL, Seq: d.Seq, Segment: d.Segment}
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
	for i, r := range rs {
		out[i] = &pb.HeaderRef{Segment: r.Segment, Endpoint: r.Endpoint, Offset: r.Offset, Addr: r.Addr, Seq: r.Seq, Offload: r.Offload}
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

// Ping implements MasterService.
func (s *Service) Ping(_ context.Context, r *pb.PingRequest) (*pb.PingResponse, error) {
	v, st, todo := s.m.Heartbeat(r.ClientId, refsFromPB(r.Zeroed))
	out := &pb.PingResponse{Status: status(nil), ViewVersion: v, NeedRemount: st == master.PingNeedRemount, Tombstones: refsToPB(todo)}
	if st == master.PingOK {
		out.DiskRemove = heldToPB(s.m.DiskSync(r.ClientId, heldFromPB(r.OnDisk), heldFromPB(r.DiskDropped)))
	}
	return out, nil
}

// MountSegment implements MasterService.
func (s *Service) MountSegment(_ context.Context, r *pb.MountSegmentRequest) (*pb.Status, error) {
	return status(s.m.MountSegment(r.ClientId, specFromPB(r.Segment))), nil
}

// RemountSegments implements MasterService: one call of a restore session
// (see RemountSegmentsRequest). The first call (RestoreId 0) opens it with
// the segments (sized by Total) and answers the window of chunks the
// client may send ahead; every call decides its chunk of objects in chunk
// order (a chunk ahead waits for its turn, within its call's deadline and
// at most a client TTL per chunk of the window), and the call without More
// closes it.
func (s *Service) RemountSegments(ctx context.Context, r *pb.RemountSegmentsRequest) (*pb.RemountSegmentsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.m.Config().ClientTTL*master.RestoreWindow) // a chunk waits for those before it
	defer cancel()
	id := r.RestoreId
	if id == 0 {
		specs := make([]master.SegmentSpec, len(r.Segments))
		for i, sg := range r.Segments {
			specs[i] = specFromPB(sg)
		}
		var err error
		if id, err = s.m.RestoreBegin(r.ClientId, specs); err != nil {
			return &pb.RemountSegmentsResponse{Status: status(err)}, nil
		}
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
func (s *Service) UnmountSegment(_ context.Context, r *pb.UnmountSegmentRequest) (*pb.Status, error) {
	if r.GraceMs > 0 {
		grace := min(time.Duration(min(r.GraceMs, maxWireMs))*time.Millisecond, time.Hour)
		return status(s.m.GracefulUnmount(r.ClientId, r.Name, grace)), nil
	}
	return status(s.m.UnmountSegment(r.ClientId, r.Name)), nil
}

// Leave implements MasterService: a closing client without segments is
// forgotten at once. It needs no secret: a client forgotten while alive is
// told to remount by its next ping and registers again.
func (s *Service) Leave(_ context.Context, r *pb.LeaveRequest) (*pb.Status, error) {
	if r.ClientId == "" {
		return status(fmt.Errorf("%w: empty client id", master.ErrInvalidParams)), nil
	}
	s.m.Leave(r.ClientId)
	return status(nil), nil
}

func (s *Service) putStart(r *pb.PutStartRequest) *pb.PutStartResponse {
	var reps []master.Replica
	var err error
	if r.Upsert {
		reps, err = s.m.Upsert(r.ClientId, r.Key, r.Size, rcFromPB(r.Config))
	} else {
		reps, err = s.m.PutStart(r.ClientId, r.Key, r.Size, rcFromPB(r.Config))
	}
	out := &pb.PutStartResponse{Status: status(err), Replicas: replicasToPB(reps)}
	if len(reps) > 0 {
		out.Seq, out.HeaderLen = reps[0].Seq, reps[0].HeaderLen
	}
	return out
}

// PutStart implements MasterService.
func (s *Service) PutStart(_ context.Context, r *pb.PutStartRequest) (*pb.PutStartResponse, error) {
	return s.putStart(r), nil
}

// BatchPutStart implements MasterService.
func (s *Service) BatchPutStart(_ context.Context, r *pb.BatchPutStartRequest) (*pb.BatchPutStartResponse, error) {
	out := &pb.BatchPutStartResponse{Results: make([]*pb.PutStartResponse, len(r.Puts))}
	for i, p := range r.Puts {
		out.Results[i] = s.putStart(p)
	}
	return out, nil
}

// PutCommit implements MasterService: the end of a put (the key's own put
// in progress, or a slot written before), then, when asked and the put
// went through, a slot for the client's next put.
func (s *Service) PutCommit(_ context.Context, r *pb.PutCommitRequest) (*pb.PutCommitResponse, error) {
	return s.putCommit(r), nil
}

func (s *Service) putCommit(r *pb.PutCommitRequest) *pb.PutCommitResponse {
	out := &pb.PutCommitResponse{}
	rc := rcFromPB(r.Config)
	if r.Slot == "" {
		out.Status = status(s.m.PutEnd(r.ClientId, r.Key, r.Crc32C))
	} else {
		tombs, gone, err := s.m.PutCommit(r.ClientId, r.Key, r.Slot, r.Crc32C, rc, r.Upsert)
		out.Status, out.SlotGone, out.Tombstones = status(err), gone, refsToPB(tombs)
	}
	if out.Status.Code == 0 && !out.SlotGone && r.ReserveSize > 0 && r.ReserveKeyLen <= uint64(s.m.Config().MaxKeyLen) {
		if slot, reps, err := s.m.PutReserve(r.ClientId, r.ReserveSize, int(r.ReserveKeyLen), rc); err == nil && len(reps) > 0 {
			out.NextSlot = slot
			out.Next = &pb.PutStartResponse{Status: status(nil), Replicas: replicasToPB(reps), Seq: reps[0].Seq, HeaderLen: reps[0].HeaderLen}
		}
	}
	return out
}

// BatchPutCommit implements MasterService: PutCommit of each put, in order.
func (s *Service) BatchPutCommit(_ context.Context, r *pb.BatchPutCommitRequest) (*pb.BatchPutCommitResponse, error) {
	out := &pb.BatchPutCommitResponse{Results: make([]*pb.PutCommitResponse, len(r.Commits))}
	keys := make([]string, len(r.Commits))
	for i, e := range r.Commits {
		out.Results[i] = s.putCommit(e)
		keys[i] = e.Key
	}
	s.m.TouchChains(keys) // one batch of a chain's blocks: one recency group
	return out, nil
}

// PutRevoke implements MasterService.
func (s *Service) PutRevoke(_ context.Context, r *pb.PutRevokeRequest) (*pb.Status, error) {
	return status(s.m.PutRevoke(r.ClientId, r.Key)), nil
}

// GetReplicaList implements MasterService.
func (s *Service) GetReplicaList(_ context.Context, r *pb.KeyRequest) (*pb.ObjectInfo, error) {
	return infoToPB(s.m.GetReplicaList(r.Key)), nil
}

// BatchGetReplicaList implements MasterService.
func (s *Service) BatchGetReplicaList(_ context.Context, r *pb.BatchKeysRequest) (*pb.BatchObjectInfo, error) {
	out := &pb.BatchObjectInfo{Results: make([]*pb.ObjectInfo, len(r.Keys))}
	for i, k := range r.Keys {
		out.Results[i] = infoToPB(s.m.GetReplicaList(k))
	}
	s.m.TouchChains(r.Keys)
	return out, nil
}

// Query implements MasterService.
func (s *Service) Query(_ context.Context, r *pb.KeyRequest) (*pb.ObjectInfo, error) {
	return infoToPB(s.m.Query(r.Key)), nil
}

// Exist implements MasterService.
func (s *Service) Exist(_ context.Context, r *pb.KeyRequest) (*pb.ExistResponse, error) {
	ok, err := s.m.Exist(r.Key)
	return &pb.ExistResponse{Status: status(err), Exists: ok}, nil
}

// BatchExist implements MasterService.
func (s *Service) BatchExist(_ context.Context, r *pb.BatchKeysRequest) (*pb.BatchExistResponse, error) {
	out := &pb.BatchExistResponse{Results: make([]*pb.ExistResponse, len(r.Keys))}
	okStatus := status(nil) // shared: the answer is only marshalled
	for i, ok := range s.m.BatchExist(r.Keys) {
		st := okStatus
		if err := s.m.CheckKey(r.Keys[i]); err != nil {
			st = status(err)
		}
		out.Results[i] = &pb.ExistResponse{Status: st, Exists: ok}
	}
	return out, nil
}

// batchExistBits answers fastrpc's FastBatchExistBits: one byte per key,
// 1 when it exists (invalid keys read 0).
func (s *Service) batchExistBits(payload []byte) ([]byte, uint8) {
	var r pb.BatchKeysRequest
	if err := pb.UnmarshalRequest(payload, &r); err != nil {
		return []byte(err.Error()), fastrpc.StatusBadRequest
	}
	out := make([]byte, len(r.Keys))
	for i, ok := range s.m.BatchExist(r.Keys) {
		if ok {
			out[i] = 1
		}
	}
	return out, fastrpc.StatusOK
}

// Remove implements MasterService.
func (s *Service) Remove(_ context.Context, r *pb.RemoveRequest) (*pb.RemoveResponse, error) {
	tombs, err := s.m.RemoveHeaders(r.Key, r.Force)
	return &pb.RemoveResponse{Status: status(err), Tombstones: refsToPB(tombs)}, nil
}

// BatchRemove implements MasterService.
func (s *Service) BatchRemove(_ context.Context, r *pb.BatchRemoveRequest) (*pb.BatchRemoveResponse, error) {
	out := &pb.BatchRemoveResponse{Results: make([]*pb.Status, len(r.Removes))}
	for i, rm := range r.Removes {
		tombs, err := s.m.RemoveHeaders(rm.Key, rm.Force)
		out.Results[i] = status(err)
		if room := maxReplyTombstones - len(out.Tombstones); room > 0 { // the nodes zero the rest
			out.Tombstones = append(out.Tombstones, refsToPB(tombs[:min(room, len(tombs))])...)
		}
	}
	return out, nil
}

// RemoveByRegex implements MasterService: one chunk when paged, else every
// chunk (see removePages).
func (s *Service) RemoveByRegex(_ context.Context, r *pb.RemoveByRegexRequest) (*pb.CountResponse, error) {
	mt, err := master.RegexMatcher(r.Pattern)
	if err != nil {
		return &pb.CountResponse{Status: status(err)}, nil
	}
	return s.removePages(mt, r.Force, r.Paged, r.After, r.Limit), nil
}

// RemoveAll implements MasterService as RemoveByRegex does.
func (s *Service) RemoveAll(_ context.Context, r *pb.RemoveAllRequest) (*pb.CountResponse, error) {
	return s.removePages(master.AllMatcher, r.Force, r.Paged, r.After, r.Limit), nil
}

// maxReplyTombstones bounds the tombstones of an unpaged bulk removal's
// answer (~60 bytes each on the wire, far below gRPC's 4 MiB): the nodes
// zero the others when their heartbeats bring them.
const maxReplyTombstones = 16 * 1024

// removePages runs one chunk of a bulk removal (paged) or all of them, the
// answer bounded either way.
func (s *Service) removePages(mt master.Matcher, force, paged bool, after string, limit int32) *pb.CountResponse {
	if limit < 0 {
		return &pb.CountResponse{Status: &pb.Status{Code: master.CodeInvalidParams, Message: "negative limit"}}
	}
	if paged {
		p := s.m.RemovePageFrom(mt, force, after, int(limit))
		return &pb.CountResponse{Status: status(nil), Count: int64(p.Removed), Tombstones: refsToPB(p.Tombstones), Next: p.Next}
	}
	out := &pb.CountResponse{Status: status(nil)}
	for {
		p := s.m.RemovePageFrom(mt, force, after, master.RemoveChunk)
		out.Count += int64(p.Removed)
		if room := maxReplyTombstones - len(out.Tombstones); room > 0 {
			out.Tombstones = append(out.Tombstones, refsToPB(p.Tombstones[:min(room, len(p.Tombstones))])...)
		}
		if p.Next == "" {
			return out
		}
		after = p.Next
	}
}

// List implements MasterService.
func (s *Service) List(_ context.Context, r *pb.ListRequest) (*pb.ListResponse, error) {
	if r.Limit < 0 || r.Limit > 100000 {
		return &pb.ListResponse{Status: &pb.Status{Code: master.CodeInvalidParams, Message: "limit not in [0,100000]"}}, nil
	}
	keys, next := s.m.List(r.Prefix, r.After, int(r.Limit))
	out := &pb.ListResponse{Status: status(nil), Next: next, Keys: make([]*pb.KeyInfo, len(keys))}
	for i, k := range keys {
		out.Keys[i] = &pb.KeyInfo{Key: k.Key, Size: k.Size, Replicas: int32(k.Replicas)}
	}
	return out, nil
}

// QuerySegment implements MasterService: with a client id, that client's
// segment of the name.
func (s *Service) QuerySegment(_ context.Context, r *pb.SegmentRequest) (*pb.SegmentInfo, error) {
	si, err := s.m.Segment(r.Name)
	if r.ClientId != "" {
		si, err = s.m.ClientSegment(r.ClientId, r.Name)
	}
	if err != nil {
		return &pb.SegmentInfo{Status: status(err)}, nil
	}
	return &pb.SegmentInfo{Status: status(nil), Segment: &pb.Segment{Name: si.Name, Endpoint: si.Endpoint, Base: si.Base, Size: si.Size},
		ClientId: si.Client, Used: si.Used, Capacity: si.Capacity, Objects: int64(si.Objects), Draining: si.Draining}, nil
}
