package main

import (
	"context"
	"encoding/json"

	"github.com/kvcache-go/mooncake/internal/dummyclient"
	"github.com/kvcache-go/mooncake/store"
)

// Replica clear and copy/move tasks (Mooncake's batch_replica_clear,
// create_copy_task, create_move_task, query_task). A dummy client forwards
// the task calls to its real client, as Mooncake's does; its replica clear
// answers NOT_SUPPORTED (Mooncake's dummy answers an empty list).

const codeNotSupported = -1012

func init() {
	codeTable = append(codeTable,
		codeMapping{store.ErrTaskNotFound, -1400},
		codeMapping{store.ErrTaskLimit, -1401},
		codeMapping{store.ErrUnavailable, -1010},
	)
}

// errNotSupported carries Mooncake's NOT_SUPPORTED code.
type errNotSupported string

func (e errNotSupported) Error() string     { return string(e) }
func (e errNotSupported) MooncakeCode() int { return codeNotSupported }

// replicaClearer is the store client's replica clear.
type replicaClearer interface {
	BatchReplicaClear(ctx context.Context, keys []string, segment string) ([]string, error)
}

// taskClient is the part of the store client (or dummy client) the task calls use.
type taskClient interface {
	CreateCopyTask(ctx context.Context, key string, targets []string) (store.TaskID, error)
	CreateMoveTask(ctx context.Context, key, source, target string) (store.TaskID, error)
	QueryTask(ctx context.Context, id store.TaskID) (store.Task, error)
}

var (
	_ replicaClearer = (*store.Client)(nil)
	_ taskClient     = (*store.Client)(nil)
	_ taskClient     = (*dummyclient.Client)(nil)
)

func (s *storeState) taskClient(op string) (taskClient, error) {
	tc, ok := s.c.(taskClient)
	if !ok {
		return nil, errNotSupported(op + " is not available to this client")
	}
	return tc, nil
}

// replicaClear returns the keys cleared as a JSON array.
func (s *storeState) replicaClear(keys []string, segment string) ([]byte, error) {
	if len(keys) == 0 {
		return []byte("[]"), nil
	}
	rc, ok := s.c.(replicaClearer)
	if !ok {
		return nil, errNotSupported("batch_replica_clear is not available to a dummy client")
	}
	ctx, cancel := s.ctx(0)
	defer cancel()
	cleared, err := rc.BatchReplicaClear(ctx, keys, segment)
	if err != nil {
		return nil, err
	}
	if cleared == nil {
		cleared = []string{}
	}
	return json.Marshal(cleared)
}

func (s *storeState) createCopyTask(key string, targets []string) (store.TaskID, error) {
	tc, err := s.taskClient("create_copy_task")
	if err != nil {
		return store.TaskID{}, err
	}
	ctx, cancel := s.ctx(0)
	defer cancel()
	return tc.CreateCopyTask(ctx, key, targets)
}

func (s *storeState) createMoveTask(key, source, target string) (store.TaskID, error) {
	tc, err := s.taskClient("create_move_task")
	if err != nil {
		return store.TaskID{}, err
	}
	ctx, cancel := s.ctx(0)
	defer cancel()
	return tc.CreateMoveTask(ctx, key, source, target)
}

// taskJSON is what query_task returns to Python.
type taskJSON struct {
	Hi        uint64   `json:"hi"`
	Lo        uint64   `json:"lo"`
	Type      int      `json:"type"`
	Status    int      `json:"status"`
	Key       string   `json:"key"`
	Source    string   `json:"source"`
	Targets   []string `json:"targets"`
	Client    string   `json:"client"`
	CreatedMs int64    `json:"created_ms"`
	UpdatedMs int64    `json:"updated_ms"`
	Message   string   `json:"message"`
}

func (s *storeState) queryTask(id store.TaskID) ([]byte, error) {
	if id == (store.TaskID{}) {
		return nil, errInvalid("query_task: the zero task id")
	}
	tc, err := s.taskClient("query_task")
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(0)
	defer cancel()
	t, err := tc.QueryTask(ctx, id)
	if err != nil {
		return nil, err
	}
	out := taskJSON{Hi: id.Hi, Lo: id.Lo, Type: int(t.Type), Status: int(t.Status), Key: t.Key, Source: t.Source, Targets: t.Targets,
		Client: t.Client, Message: t.Message}
	if !t.Created.IsZero() {
		out.CreatedMs = t.Created.UnixMilli()
	}
	if !t.Updated.IsZero() {
		out.UpdatedMs = t.Updated.UnixMilli()
	}
	return json.Marshal(out)
}
