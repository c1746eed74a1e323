package dummyclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvcache-go/mooncake/store"
)

// Copy/move tasks, forwarded to the real client as Mooncake's dummy client
// does (its batch_replica_clear is not forwarded: it answers an empty list).

// taskBackend is what the real client's store offers for tasks.
type taskBackend interface {
	CreateCopyTask(ctx context.Context, key string, targets []string) (store.TaskID, error)
	CreateMoveTask(ctx context.Context, key, source, target string) (store.TaskID, error)
	QueryTask(ctx context.Context, id store.TaskID) (store.Task, error)
}

var _ taskBackend = (*store.Client)(nil)

// handleTask runs a task op; ok is false for an op it does not know.
func (s *Server) handleTask(ctx context.Context, q *request) (rep reply, ok bool, err error) {
	tb, isTB := s.cfg.Store.(taskBackend)
	switch q.Op {
	case "create_copy_task", "create_move_task", "query_task":
	default:
		return reply{}, false, nil
	}
	if !isTB {
		return reply{}, true, fmt.Errorf("dummyclient: %s: the real client cannot run tasks: %w", q.Op, store.ErrInvalid)
	}
	switch q.Op {
	case "create_copy_task":
		var id store.TaskID
		id, err = tb.CreateCopyTask(ctx, q.Key, q.Targets)
		rep.TaskID = &id
	case "create_move_task":
		var id store.TaskID
		id, err = tb.CreateMoveTask(ctx, q.Key, q.Source, q.Target)
		rep.TaskID = &id
	default: // query_task
		if q.Task == nil {
			return reply{}, true, fmt.Errorf("dummyclient: query_task without a task id: %w", store.ErrInvalid)
		}
		var t store.Task
		t, err = tb.QueryTask(ctx, *q.Task)
		rep.Task = &t
	}
	return rep, true, err
}

// CreateCopyTask asks the real client's master for a copy task.
func (c *Client) CreateCopyTask(ctx context.Context, key string, targets []string) (store.TaskID, error) {
	return c.taskID(ctx, request{Op: "create_copy_task", Key: key, Targets: targets})
}

// CreateMoveTask asks the real client's master for a move task.
func (c *Client) CreateMoveTask(ctx context.Context, key, source, target string) (store.TaskID, error) {
	return c.taskID(ctx, request{Op: "create_move_task", Key: key, Source: source, Target: target})
}

func (c *Client) taskID(ctx context.Context, q request) (store.TaskID, error) {
	rep, _, err := c.call(ctx, q, nil, nil)
	if err != nil {
		return store.TaskID{}, err
	}
	if rep.TaskID == nil {
		return store.TaskID{}, errors.New("dummyclient: malformed reply from the real client: no task id")
	}
	return *rep.TaskID, nil
}

// QueryTask asks the real client's master for a task's state.
func (c *Client) QueryTask(ctx context.Context, id store.TaskID) (store.Task, error) {
	rep, _, err := c.call(ctx, request{Op: "query_task", Task: &id}, nil, nil)
	if err != nil {
		return store.Task{}, err
	}
	if rep.Task == nil {
		return store.Task{}, errors.New("dummyclient: malformed reply from the real client: no task")
	}
	return *rep.Task, nil
}
