package store

import (
	"context"
	"fmt"
	"time"

	"github.com/kvcache-go/mooncake/internal/storeerr"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/transfer"
)

// Replica clear and copy/move tasks (the master's MasterTasks service).
//
// A copy or move task is executed by the client that owns the task's
// source segment: every client contributing a segment asks the master for
// its tasks after each ping, copies header and value from its own segment
// memory to the targets in one transfer batch (after checking the value's
// CRC32C) and reports the outcome; the master then adds the replicas.

// Task errors callers branch on.
var (
	ErrTaskNotFound = storeerr.ErrTaskNotFound // QueryTask of an unknown (or forgotten) id
	ErrTaskLimit    = storeerr.ErrTaskLimit    // the master has too many pending tasks
	ErrUnavailable  = storeerr.ErrUnavailable  // a target segment is being unmounted
)

// TaskID identifies a copy or move task (Mooncake's UUID).
type TaskID struct{ Hi, Lo uint64 }

// TaskType is what a task does (Mooncake's values: REPLICA_COPY 0, REPLICA_MOVE 1).
type TaskType int

// TaskStatus is where a task is (Mooncake's values).
type TaskStatus int

// Task types and states.
const (
	TaskCopy TaskType = 0
	TaskMove TaskType = 1

	TaskPending    TaskStatus = 0
	TaskProcessing TaskStatus = 1
	TaskFailed     TaskStatus = 2
	TaskSuccess    TaskStatus = 3
)

// Task is the state of a copy or move task.
type Task struct {
	ID      TaskID
	Type    TaskType
	Status  TaskStatus
	Key     string
	Source  string   // source segment
	Targets []string // target segments
	Client  string   // the client executing it
	Created time.Time
	Updated time.Time
	Message string // the reason of a failure
}

// Finished reports whether the task succeeded or failed.
func (t Task) Finished() bool { return t.Status == TaskSuccess || t.Status == TaskFailed }

func (c *Client) tasks() pb.MasterTasksClient { return pb.NewMasterTasksClient(c.conn) }

// BatchReplicaClear drops the replicas of keys this client put (all of them
// with segment "", otherwise those on that segment; an object left without
// a copy is removed) and returns the keys it cleared. Keys that are
// missing, put by another client, unfinished or in use (leased, or written,
// read or checked within the master's lease TTL) are skipped.
func (c *Client) BatchReplicaClear(ctx context.Context, keys []string, segment string) ([]string, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	var r *pb.BatchReplicaClearResponse
	sent := time.Now()
	err := c.call(ctx, func(ctx context.Context) (*pb.Status, error) {
		var err error
		r, err = c.tasks().BatchReplicaClear(ctx, &pb.BatchReplicaClearRequest{ClientId: c.cfg.ClientID, Keys: keys, Segment: segment})
		return r.GetStatus(), err
	})
	if err != nil {
		return nil, fmt.Errorf("store: replica clear: %w", err)
	}
	c.zeroHeaders(ctx, sent, r.Tombstones)
	return r.ClearedKeys, nil
}

// CreateCopyTask asks the master for a replica of key on each target
// segment and returns the task's id at once; QueryTask or WaitTask follow it.
func (c *Client) CreateCopyTask(ctx context.Context, key string, targets []string) (TaskID, error) {
	return c.createTask(ctx, "copy", key, func(ctx context.Context) (*pb.CreateTaskResponse, error) {
		return c.tasks().CreateCopyTask(ctx, &pb.CreateCopyTaskRequest{Key: key, Targets: targets})
	})
}

// CreateMoveTask asks the master to move key's replica on source to target.
func (c *Client) CreateMoveTask(ctx context.Context, key, source, target string) (TaskID, error) {
	return c.createTask(ctx, "move", key, func(ctx context.Context) (*pb.CreateTaskResponse, error) {
		return c.tasks().CreateMoveTask(ctx, &pb.CreateMoveTaskRequest{Key: key, Source: source, Target: target})
	})
}

func (c *Client) createTask(ctx context.Context, what, key string, f func(context.Context) (*pb.CreateTaskResponse, error)) (TaskID, error) {
	if c.isClosed() {
		return TaskID{}, ErrClosed
	}
	var r *pb.CreateTaskResponse
	err := c.call(ctx, func(ctx context.Context) (*pb.Status, error) {
		var err error
		r, err = f(ctx)
		return r.GetStatus(), err
	})
	if err != nil {
		return TaskID{}, fmt.Errorf("store: %s task of %q: %w", what, key, err)
	}
	return TaskID{Hi: r.Id.GetHi(), Lo: r.Id.GetLo()}, nil
}

// QueryTask returns a task's state.
func (c *Client) QueryTask(ctx context.Context, id TaskID) (Task, error) {
	if c.isClosed() {
		return Task{}, ErrClosed
	}
	var r *pb.QueryTaskResponse
	err := c.call(ctx, func(ctx context.Context) (*pb.Status, error) {
		var err error
		r, err = c.tasks().QueryTask(ctx, &pb.TaskId{Hi: id.Hi, Lo: id.Lo})
		return r.GetStatus(), err
	})
	if err != nil {
		return Task{}, fmt.Errorf("store: query task %016x%016x: %w", id.Hi, id.Lo, err)
	}
	t := r.Task
	return Task{ID: id, Type: TaskType(t.GetType()), Status: TaskStatus(t.GetStatus()), Key: t.GetKey(), Source: t.GetSource(),
		Targets: t.GetTargets(), Client: t.GetClient(), Created: msTime(t.GetCreatedUnixMs()),
		Updated: msTime(t.GetUpdatedUnixMs()), Message: t.GetMessage()}, nil
}

// WaitTask polls QueryTask every poll until the task has finished or ctx
// ends, and returns its last state.
func (c *Client) WaitTask(ctx context.Context, id TaskID, poll time.Duration) (Task, error) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		task, err := c.QueryTask(ctx, id)
		if err != nil || task.Finished() {
			return task, err
		}
		select {
		case <-ctx.Done():
			return task, ctx.Err()
		case <-t.C:
		}
	}
}

// maxTasksPerPoll bounds the tasks one poll takes on.
const maxTasksPerPoll = 16

// pollTasks fetches this client's copy/move tasks and runs them in the
// background, one batch at a time (called after each ping by a client with
// a segment).
func (c *Client) pollTasks(ctx context.Context) {
	if c.segmentSpec == nil || !c.taskBusy.CompareAndSwap(false, true) {
		return
	}
	rctx, cancel := c.rpcCtx(ctx)
	r, err := c.tasks().FetchTasks(rctx, &pb.FetchTasksRequest{ClientId: c.cfg.ClientID, Max: maxTasksPerPoll})
	cancel()
	if err != nil || len(r.Tasks) == 0 {
		if err != nil {
			c.log.Debug("store: fetch tasks", "err", err)
		}
		c.taskBusy.Store(false)
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.taskBusy.Store(false)
		for _, a := range r.Tasks {
			c.runTask(a)
		}
	}()
}

// runTask executes one assignment and reports it, within its deadline.
func (c *Client) runTask(a *pb.TaskAssignment) {
	ctx, cancel := context.WithDeadline(c.stopCtx, time.UnixMilli(a.DeadlineUnixMs))
	defer cancel()
	failure := ""
	if err := c.copyOut(ctx, a); err != nil {
		failure = err.Error()
		c.log.Warn("store: task failed", "key", a.Task.GetKey(), "err", err)
	}
	rctx, rcancel := c.rpcCtx(context.WithoutCancel(ctx))
	defer rcancel()
	st, err := c.tasks().FinishTask(rctx, &pb.FinishTaskRequest{ClientId: c.cfg.ClientID, Id: a.Task.GetId(), Failure: failure})
	if err == nil {
		err = statusErr(st)
	}
	if err != nil {
		c.log.Warn("store: report task", "key", a.Task.GetKey(), "err", err)
	}
}

// copyOut writes the object (header and value) from this client's segment
// to every target of a.
func (c *Client) copyOut(ctx context.Context, a *pb.TaskAssignment) error {
	hdr, size := a.HeaderLen, a.Size
	base, n := c.segmentSpec.Base, uint64(len(c.segment))
	start := a.Source.GetAddr() - hdr
	if a.Source.GetSegment() != c.segmentSpec.Name || a.Source.GetAddr() < hdr || start < base || start-base > n || n-(start-base) < hdr+size {
		return fmt.Errorf("%w: source %s@0x%x is not in this client's segment", ErrInvalid, a.Source.GetSegment(), a.Source.GetAddr())
	}
	src := c.segment[start-base : start-base+hdr+size]
	if crc := Checksum(src[hdr:]); crc != a.Crc32C {
		return fmt.Errorf("%w: %q in segment %s", ErrCorrupt, a.Task.GetKey(), c.segmentSpec.Name)
	}
	reqs := make([]transfer.Request, 0, len(a.Targets))
	for _, t := range a.Targets {
		seg, err := c.mover.OpenSegment(ctx, t.Endpoint)
		if err != nil {
			return fmt.Errorf("%w: open segment %s: %w", ErrTransfer, t.Endpoint, err)
		}
		reqs = append(reqs, transfer.Request{Op: transfer.OpWrite, Local: transfer.AddrOf(src), Segment: seg, Remote: t.Addr - hdr, Length: len(src), Grant: string(t.Grant)})
	}
	if len(reqs) == 0 {
		return nil
	}
	if err := c.mover.Transfer(ctx, reqs); err != nil {
		return fmt.Errorf("%w: write to targets: %w", ErrTransfer, err)
	}
	return nil
}
