package main

import (
	"context"
	"encoding/json"

	"github.com/kvcache-go/mooncake/store"
)

// Replica clear and copy/move tasks (Mooncake's batch_replica_clear,
// create_copy_task, create_move_task, query_task) for a store client that
// talks to the master itself. A dummy client has no master connection of
// its own: these calls answer NOT_SUPPORTED there.

const codeNotSupported = -1012

// errNotSupported carries Mooncake's NOT_SUPPORTED code.
type errNotSupported string

func (e errNotSupported) Error() string     { return string(e) }
func (e errNotSupported) MooncakeCode() int { return codeNotSupported }

// taskClient is the part of *store.Client these calls use.
type taskClient interface {
	BatchReplicaClear(ctx context.Context, keys []string, segment string) ([]string, error)
	CreateCopyTask(ctx context.Context, key string, targets []string) (store.TaskID, error)
	CreateMoveTask(ctx context.Context, key, source, target string) (store.TaskID, error)
	QueryTask(ctx context.Context, id store.TaskID) (store.Task, error)
}

var _ taskClient = (*store.Client)(nil)

func (s *storeState) taskClient(op string) (taskClient, error) {
	tc, ok := s.c.(taskClient)
	if !ok {
		return nil, errNotSupported(op + " is not available to a dummy client")
	}
	return tc, nil
}

// replicaClear returns the keys cleared as a JSON array.
func (s *storeState) replicaClear(keys []string, segment string) ([]byte, error) {
	if len(keys) == 0 {
		return []byte("[]"), nil
	}
	tc, err := s.taskClient("batch_replica_clear")
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(0)
	defer cancel()
	cleared, err := tc.BatchReplicaClear(ctx, keys, segment)
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
