package masterserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/storeerr"
	"github.com/kvcache-go/mooncake/internal/tenant"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// TaskService adapts the core's replica clear and copy/move tasks to the
// gRPC MasterTasks service (tasks.proto), served beside MasterService.
type TaskService struct {
	pb.UnimplementedMasterTasksServer
	m      *master.Master
	grants *granter // nil: no data-path grants (grants.go)
	// owns reports whether a caller may act for a segment (tenants:
	// Service.ownsSegment); nil: always.
	owns func(*tenant.Tenant, string) bool
}

// ownsClient reports whether the caller may take or finish the tasks of
// clientID: with tenants, only the tenant that mounted all its segments
// (the tasks carry grants for their objects' bytes), whatever client id a
// caller names.
func (s *TaskService) ownsClient(ctx context.Context, clientID string) bool {
	if s.owns == nil {
		return true
	}
	t := callerOf(ctx)
	if !bound(t) {
		return true
	}
	for _, name := range s.m.ClientSegmentNames(clientID) {
		if !s.owns(t, name) {
			return false
		}
	}
	return true
}

// NewTaskService wraps a core.
func NewTaskService(m *master.Master) *TaskService { return &TaskService{m: m} }

var _ pb.MasterTasksServer = (*TaskService)(nil)

// maxFetch bounds the tasks one FetchTasks answer carries.
const maxFetch = 64

// BatchReplicaClear implements MasterTasksServer.
func (s *TaskService) BatchReplicaClear(ctx context.Context, r *pb.BatchReplicaClearRequest) (*pb.BatchReplicaClearResponse, error) {
	ns := callerOf(ctx).Namespace
	keys, tombs, err := s.m.BatchReplicaClear(r.ClientId, scopeKeys(ns, r.Keys), r.Segment)
	for i, k := range keys {
		keys[i] = unscope(ns, k)
	}
	return &pb.BatchReplicaClearResponse{Status: status(err), ClearedKeys: keys, Tombstones: refsToPB(tombs)}, nil
}

// CreateCopyTask implements MasterTasksServer.
func (s *TaskService) CreateCopyTask(ctx context.Context, r *pb.CreateCopyTaskRequest) (*pb.CreateTaskResponse, error) {
	id, err := s.m.CreateCopyTask(scope(callerOf(ctx).Namespace, r.Key), r.Targets)
	return &pb.CreateTaskResponse{Status: status(err), Id: taskIDToPB(id)}, nil
}

// CreateMoveTask implements MasterTasksServer.
func (s *TaskService) CreateMoveTask(ctx context.Context, r *pb.CreateMoveTaskRequest) (*pb.CreateTaskResponse, error) {
	id, err := s.m.CreateMoveTask(scope(callerOf(ctx).Namespace, r.Key), r.Source, r.Target)
	return &pb.CreateTaskResponse{Status: status(err), Id: taskIDToPB(id)}, nil
}

// QueryTask implements MasterTasksServer.
func (s *TaskService) QueryTask(ctx context.Context, r *pb.TaskId) (*pb.QueryTaskResponse, error) {
	t, err := s.m.QueryTask(taskIDFromPB(r))
	ns := callerOf(ctx).Namespace
	if err == nil && !strings.HasPrefix(t.Key, ns) { // another tenant's task reads as unknown
		err = fmt.Errorf("%w: %x%x", storeerr.ErrTaskNotFound, r.GetHi(), r.GetLo())
	}
	if err != nil {
		return &pb.QueryTaskResponse{Status: status(err)}, nil
	}
	t.Key = unscope(ns, t.Key)
	return &pb.QueryTaskResponse{Status: status(nil), Task: taskToPB(t)}, nil
}

// FetchTasks implements MasterTasksServer.
func (s *TaskService) FetchTasks(ctx context.Context, r *pb.FetchTasksRequest) (*pb.FetchTasksResponse, error) {
	if !s.ownsClient(ctx, r.ClientId) {
		return &pb.FetchTasksResponse{Status: status(nil)}, nil
	}
	n := int(r.Max)
	if n <= 0 || n > maxFetch {
		n = maxFetch
	}
	as := s.m.FetchTasks(r.ClientId, n)
	out := &pb.FetchTasksResponse{Status: status(nil)}
	for _, a := range as {
		ta := &pb.TaskAssignment{Task: taskToPB(a.Task), Size: a.Size, Crc32C: a.CRC, HeaderLen: a.HeaderLen,
			Source: replicasToPB([]master.Replica{a.From})[0], Targets: replicasToPB(a.To), DeadlineUnixMs: unixMs(a.Deadline)}
		s.grants.task(ta)
		out.Tasks = append(out.Tasks, ta)
	}
	return out, nil
}

// FinishTask implements MasterTasksServer.
func (s *TaskService) FinishTask(ctx context.Context, r *pb.FinishTaskRequest) (*pb.Status, error) {
	if !s.ownsClient(ctx, r.ClientId) {
		return status(fmt.Errorf("%w: client %q", master.ErrTaskNotFound, r.ClientId)), nil
	}
	return status(s.m.FinishTask(r.ClientId, taskIDFromPB(r.Id), r.Failure)), nil
}

func taskIDToPB(id master.TaskID) *pb.TaskId { return &pb.TaskId{Hi: id.Hi, Lo: id.Lo} }

func taskIDFromPB(id *pb.TaskId) master.TaskID { return master.TaskID{Hi: id.GetHi(), Lo: id.GetLo()} }

func taskToPB(t master.Task) *pb.TaskInfo {
	return &pb.TaskInfo{Id: taskIDToPB(t.ID), Type: int32(t.Type), Status: int32(t.Status), Key: t.Key, Source: t.Source,
		Targets: t.Targets, Client: t.Client, CreatedUnixMs: unixMs(t.Created), UpdatedUnixMs: unixMs(t.Updated), Message: t.Message}
}
