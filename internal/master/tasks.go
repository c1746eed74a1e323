package master

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/storeerr"
)

// Copy and move tasks (Mooncake's task manager). CreateCopyTask and
// CreateMoveTask record a task for the client that owns the source
// segment (it holds the bytes); that client polls FetchTasks, which
// allocates the target space, marks the task PROCESSING and grants the
// object a read lease; it writes header and value from its own memory to
// the targets (checking the CRC32C first) and reports with FinishTask,
// which adds the target replicas (and, for a move, drops the source one)
// when the object is still the version that was copied. A task waits at
// most TaskPendingTimeout to be fetched and TaskProcessingTimeout to be
// finished, and fails at once when its client is dropped; a task whose
// targets have no room stays pending and is retried up to TaskRetries
// times. Finished tasks are kept (for QueryTask) up to MaxFinishedTasks.

// Task errors (see package storeerr).
var (
	ErrTaskNotFound = storeerr.ErrTaskNotFound
	ErrTaskLimit    = storeerr.ErrTaskLimit
	ErrUnavailable  = storeerr.ErrUnavailable
)

// Mooncake's task manager defaults.
const (
	TaskPendingTimeout    = 300 * time.Second
	TaskProcessingTimeout = 300 * time.Second
	MaxPendingTasks       = 10000
	MaxFinishedTasks      = 10000
	TaskRetries           = 10
)

// TaskID is a task's id: Mooncake's UUID, a pair of 64-bit ints.
type TaskID struct{ Hi, Lo uint64 }

// TaskType is what a task does (Mooncake's values).
type TaskType int

// Task types.
const (
	TaskCopy TaskType = 0 // REPLICA_COPY: one more replica on each target
	TaskMove TaskType = 1 // REPLICA_MOVE: the source replica goes to the target
)

// TaskStatus is a task's state (Mooncake's values).
type TaskStatus int

// Task states: PENDING -> PROCESSING -> SUCCESS or FAILED.
const (
	TaskPending    TaskStatus = 0
	TaskProcessing TaskStatus = 1
	TaskFailed     TaskStatus = 2
	TaskSuccess    TaskStatus = 3
)

func (s TaskStatus) finished() bool { return s == TaskFailed || s == TaskSuccess }

// Task is the public view of a task (QueryTask).
type Task struct {
	ID      TaskID
	Type    TaskType
	Status  TaskStatus
	Key     string
	Source  string   // source segment
	Targets []string // target segments
	Client  string   // the client that executes it (owner of Source)
	Created time.Time
	Updated time.Time
	Message string // why it failed, or what it did
}

// TaskAssignment is a task handed to its client by FetchTasks: copy the
// object's HeaderLen+Size bytes that start at From.Addr-HeaderLen in the
// client's own segment to To[i].Addr-HeaderLen for every target, after
// checking the value against CRC.
type TaskAssignment struct {
	Task
	Size      uint64
	CRC       uint32
	HeaderLen uint64
	From      Replica
	To        []Replica // nothing to write when empty (the targets hold it already)
	Deadline  time.Time // FinishTask must come before this
}

type task struct {
	Task
	tries   int
	seq     uint64  // object version being copied
	targets []place // allocated target space (PROCESSING)
	asize   uint64  // bytes of each target allocation
	hdr     uint64  // header length in front of the value
}

type taskTable struct {
	all      map[TaskID]*task
	active   map[TaskID]*task    // PENDING and PROCESSING: what expiry looks at
	pending  map[string][]TaskID // client -> queue
	finished []TaskID            // oldest first
	npending int
	expired  time.Time // last expiry scan
}

// taskExpiryEvery bounds how often the task calls scan the active tasks
// for missed deadlines (each call would otherwise pay for all of them).
const taskExpiryEvery = 100 * time.Millisecond

func (m *Master) tasksLocked() *taskTable {
	if m.tasks == nil {
		m.tasks = &taskTable{all: map[TaskID]*task{}, active: map[TaskID]*task{}, pending: map[string][]TaskID{}}
	}
	return m.tasks
}

func (m *Master) newTaskIDLocked(tt *taskTable) TaskID {
	for {
		id := TaskID{m.rng.Uint64(), m.rng.Uint64()}
		if _, dup := tt.all[id]; !dup && id != (TaskID{}) {
			return id
		}
	}
}

// CreateCopyTask asks for a replica of key on each target segment. The
// copy starts from a random memory replica of the object and is executed by
// that replica's client.
func (m *Master) CreateCopyTask(key string, targets []string) (TaskID, error) {
	if err := m.checkKey(key); err != nil {
		return TaskID{}, err
	}
	if len(targets) == 0 {
		return TaskID{}, fmt.Errorf("%w: copy of %q: no target segment", ErrInvalidParams, key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, err := m.taskObjectLocked(key)
	if err != nil {
		return TaskID{}, err
	}
	for _, t := range targets {
		if err := m.taskTargetLocked(key, t); err != nil {
			return TaskID{}, err
		}
	}
	src := m.segOf(m.reps(o)[m.rng.IntN(int(o.nrep))])
	return m.submitLocked(TaskCopy, key, src, slices.Clone(targets))
}

// CreateMoveTask asks for key's replica on source to move to target.
func (m *Master) CreateMoveTask(key, source, target string) (TaskID, error) {
	if err := m.checkKey(key); err != nil {
		return TaskID{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, err := m.taskObjectLocked(key)
	if err != nil {
		return TaskID{}, err
	}
	if source == target {
		return TaskID{}, fmt.Errorf("%w: move of %q: source and target are both %q", ErrInvalidParams, key, source)
	}
	if err := m.taskTargetLocked(key, target); err != nil {
		return TaskID{}, err
	}
	i := slices.IndexFunc(m.reps(o), func(r replica) bool { return m.segOf(r).spec.Name == source })
	if i < 0 {
		return TaskID{}, fmt.Errorf("%w: move of %q: no replica on segment %q", ErrInvalidParams, key, source)
	}
	return m.submitLocked(TaskMove, key, m.segOf(m.reps(o)[i]), []string{target})
}

// taskObjectLocked is the complete object a task copies, with at least one
// memory replica.
func (m *Master) taskObjectLocked(key string) (*object, error) {
	o := m.objects.get(key)
	if o == nil || !o.complete {
		return nil, fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	if o.nrep == 0 {
		return nil, fmt.Errorf("%q has no memory replica to copy from", key) // Mooncake: INTERNAL_ERROR
	}
	return o, nil
}

// taskTargetLocked checks that a segment named name can take a copy: one is
// mounted and not all of them are being unmounted.
func (m *Master) taskTargetLocked(key, name string) error {
	named := m.namedLocked(name)
	if len(named) == 0 {
		return fmt.Errorf("%w: %q: target segment %q is not mounted", ErrInvalidParams, key, name)
	}
	if !slices.ContainsFunc(named, func(s *segment) bool { return !s.draining }) {
		return fmt.Errorf("%w: %q: target segment %q is being unmounted", ErrUnavailable, key, name)
	}
	return nil
}

func (m *Master) submitLocked(typ TaskType, key string, src *segment, targets []string) (TaskID, error) {
	now := m.clock.Now()
	tt := m.tasksLocked()
	m.expireTasksLocked(now)
	if tt.npending >= MaxPendingTasks {
		return TaskID{}, fmt.Errorf("%w: %d tasks wait", ErrTaskLimit, tt.npending)
	}
	t := &task{Task: Task{ID: m.newTaskIDLocked(tt), Type: typ, Status: TaskPending, Key: key, Source: src.spec.Name,
		Targets: targets, Client: src.client, Created: now, Updated: now}}
	tt.all[t.ID] = t
	tt.active[t.ID] = t
	tt.pending[t.Client] = append(tt.pending[t.Client], t.ID)
	tt.npending++
	return t.ID, nil
}

// QueryTask returns a task's state; ErrTaskNotFound for an unknown id (or
// one forgotten after MaxFinishedTasks newer tasks finished).
func (m *Master) QueryTask(id TaskID) (Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tt := m.tasksLocked()
	m.expireTasksLocked(m.clock.Now())
	t := tt.all[id]
	if t == nil {
		return Task{}, fmt.Errorf("%w: %016x%016x", ErrTaskNotFound, id.Hi, id.Lo)
	}
	out := t.Task
	out.Targets = slices.Clone(t.Targets)
	return out, nil
}

// FetchTasks hands up to limit of clientID's pending tasks to it, each with
// its target space allocated. Tasks that cannot start fail (the object or
// the source replica is gone, a target is no longer mounted) or, when the
// targets have no room, stay pending for a later fetch.
func (m *Master) FetchTasks(clientID string, limit int) []TaskAssignment {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	tt := m.tasksLocked()
	m.expireTasksLocked(now)
	queue := tt.pending[clientID]
	if len(queue) == 0 {
		return nil // the common case: every segment owner asks after each ping
	}
	var out []TaskAssignment
	var keep []TaskID
	for _, id := range queue {
		t := tt.all[id]
		if t == nil || t.Status != TaskPending {
			continue
		}
		if len(out) >= limit {
			keep = append(keep, id)
			continue
		}
		a, err := m.startTaskLocked(t, now)
		switch {
		case err == nil:
			tt.npending--
			out = append(out, a)
		case storeerr.Code(err) == CodeNoAvailableHandle && t.tries < TaskRetries:
			t.tries++
			t.Message = err.Error()
			keep = append(keep, id)
		default:
			tt.npending--
			m.finishLocked(t, TaskFailed, err.Error(), now)
		}
	}
	if len(keep) == 0 {
		delete(tt.pending, clientID)
	} else {
		tt.pending[clientID] = keep
	}
	return out
}

// startTaskLocked allocates a task's target space and marks it PROCESSING.
func (m *Master) startTaskLocked(t *task, now time.Time) (TaskAssignment, error) {
	o, err := m.taskObjectLocked(t.Key)
	if err != nil {
		return TaskAssignment{}, err
	}
	i := slices.IndexFunc(m.reps(o), func(r replica) bool { return m.segOf(r).spec.Name == t.Source })
	if i < 0 || m.segOf(m.reps(o)[i]).client != t.Client {
		return TaskAssignment{}, fmt.Errorf("%w: %q has no replica on segment %q any more", ErrObjectNotFound, t.Key, t.Source)
	}
	from := place{seg: m.segOf(m.reps(o)[i]), off: m.reps(o)[i].off}
	var targets []place
	undo := func() {
		for _, r := range targets {
			r.seg.alloc.Free(r.off, o.alloc())
		}
	}
	for _, name := range t.Targets {
		if err := m.taskTargetLocked(t.Key, name); err != nil {
			undo()
			return TaskAssignment{}, err
		}
		if slices.ContainsFunc(m.reps(o), func(r replica) bool { return m.segOf(r).spec.Name == name }) ||
			slices.ContainsFunc(targets, func(r place) bool { return r.seg.spec.Name == name }) {
			continue // already there
		}
		placed := false
		for _, s := range m.namedLocked(name) { // any segment of that name (several clients may share it)
			if s.draining || m.restoringLocked(s) {
				continue
			}
			if off, ok := s.alloc.Alloc(o.alloc()); ok {
				targets = append(targets, place{seg: s, off: off})
				placed = true
				break
			}
		}
		if !placed {
			undo()
			return TaskAssignment{}, fmt.Errorf("%w: %d bytes on segment %q for %q", ErrNoSpace, o.alloc(), name, t.Key)
		}
	}
	t.targets, t.seq, t.asize, t.hdr = targets, o.seq, o.alloc(), o.header()
	t.Status, t.Updated, t.Message = TaskProcessing, now, ""
	m.leaseLocked(o, now.Add(m.cfg.LeaseTTL)) // no remove or eviction while the bytes are read (best effort: FinishTask checks the version)
	a := TaskAssignment{Task: t.Task, Size: o.size, CRC: o.crc, HeaderLen: o.header(), Deadline: now.Add(TaskProcessingTimeout)}
	a.Targets = slices.Clone(t.Targets)
	a.From = Replica{Segment: from.seg.spec.Name, Endpoint: from.seg.spec.Endpoint, Addr: from.seg.spec.Base + from.off + o.header(),
		Size: o.size, HeaderLen: o.header(), Seq: o.seq}
	for _, r := range targets {
		a.To = append(a.To, Replica{Segment: r.seg.spec.Name, Endpoint: r.seg.spec.Endpoint, Addr: r.seg.spec.Base + r.off + o.header(),
			Size: o.size, HeaderLen: o.header(), Seq: o.seq})
	}
	return a, nil
}

// FinishTask is the executing client's report: failure "" means every
// target was written, and the target replicas join the object (a move
// also drops the source replica) if it is still the version that was
// copied; otherwise the target space is released and the task fails with
// the reason.
func (m *Master) FinishTask(clientID string, id TaskID, failure string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	tt := m.tasksLocked()
	t := tt.all[id]
	if t == nil {
		return fmt.Errorf("%w: %016x%016x", ErrTaskNotFound, id.Hi, id.Lo)
	}
	if t.Client != clientID {
		return fmt.Errorf("%w: task %016x%016x belongs to another client", ErrNotOwner, id.Hi, id.Lo)
	}
	if t.Status != TaskProcessing {
		if t.Status.finished() {
			return nil // already finished (timed out): nothing to do
		}
		return fmt.Errorf("%w: task %016x%016x was not fetched", ErrInvalidParams, id.Hi, id.Lo)
	}
	if failure != "" {
		m.releaseTargetsLocked(t, now, false)
		m.finishLocked(t, TaskFailed, failure, now)
		return nil
	}
	o := m.objects.get(t.Key)
	if o == nil || !o.complete || o.seq != t.seq {
		m.releaseTargetsLocked(t, now, false)
		m.finishLocked(t, TaskFailed, fmt.Sprintf("%q was removed or replaced during the %s", t.Key, t.verb()), now)
		return nil
	}
	added := 0
	for _, r := range t.targets {
		if m.segments[r.seg.key] != r.seg || slices.ContainsFunc(m.reps(o), func(x replica) bool { return x.seg == r.seg.id }) ||
			o.nrep == maxObjectReplicas {
			m.freeRangeLocked(r.seg, r.off, o.alloc(), t.Key, o.seq, o.header(), "", 0) // unmounted meanwhile, replicated otherwise, or full
			continue
		}
		m.objects.setReps(o, append(m.reps(o), replica{seg: r.seg.id, off: r.off}))
		m.segAdd(r.seg, o)
		m.replicasChangedLocked(o, 1)
		added++
	}
	t.targets = nil
	if t.Type == TaskMove {
		target := t.Targets[0]
		if !slices.ContainsFunc(m.reps(o), func(r replica) bool { return m.segOf(r).spec.Name == target }) {
			m.finishLocked(t, TaskFailed, fmt.Sprintf("target segment %q went away during the move", target), now)
			return nil
		}
		for _, r := range m.reps(o) {
			if m.segOf(r).spec.Name == t.Source {
				m.freeRangeLocked(m.segOf(r), r.off, o.alloc(), t.Key, o.seq, o.header(), "", m.grantHoldLocked(o)) // its put's grant covers the source
				m.segDrop(m.segOf(r), o)
			}
		}
		n := int(o.nrep)
		m.objects.setReps(o, slices.DeleteFunc(m.reps(o), func(r replica) bool { return m.segOf(r).spec.Name == t.Source }))
		m.replicasChangedLocked(o, int(o.nrep)-n)
	}
	m.finishLocked(t, TaskSuccess, fmt.Sprintf("%s of %q done: %d replica(s) added", t.verb(), t.Key, added), now)
	return nil
}

func (t *task) verb() string {
	if t.Type == TaskMove {
		return "move"
	}
	return "copy"
}

// releaseTargetsLocked gives back a task's target space. late means the
// executor may still be writing (it missed its deadline): the space is
// held as a zombie for PutTimeout first.
func (m *Master) releaseTargetsLocked(t *task, now time.Time, late bool) {
	for _, r := range t.targets {
		if late {
			m.zombies = append(m.zombies, zombie{seg: r.seg, off: r.off, size: t.asize, releaseAt: now.Add(m.cfg.PutTimeout), key: t.Key, seq: t.seq, hdr: t.hdr})
			continue
		}
		m.freeRangeLocked(r.seg, r.off, t.asize, t.Key, t.seq, t.hdr, "", 0)
	}
	t.targets = nil
}

func (m *Master) finishLocked(t *task, st TaskStatus, msg string, now time.Time) {
	tt := m.tasksLocked()
	t.Status, t.Message, t.Updated = st, msg, now
	delete(tt.active, t.ID)
	tt.finished = append(tt.finished, t.ID)
	for len(tt.finished) > MaxFinishedTasks {
		delete(tt.all, tt.finished[0])
		tt.finished = tt.finished[1:]
	}
}

// expireTasksLocked fails the tasks past their deadlines and those of
// clients that were dropped.
func (m *Master) expireTasksLocked(now time.Time) {
	tt := m.tasks
	if tt == nil || len(tt.active) == 0 || now.Sub(tt.expired) < taskExpiryEvery {
		return
	}
	tt.expired = now
	for _, t := range tt.active {
		_, alive := m.clients[t.Client]
		switch {
		case t.Status == TaskPending && (!alive || now.Sub(t.Created) > TaskPendingTimeout):
			tt.npending--
			m.finishLocked(t, TaskFailed, pendingFailure(alive), now)
		case t.Status == TaskProcessing && (!alive || now.Sub(t.Updated) > TaskProcessingTimeout):
			m.releaseTargetsLocked(t, now, alive)
			m.finishLocked(t, TaskFailed, processingFailure(alive), now)
		}
	}
	for c, q := range tt.pending {
		q = slices.DeleteFunc(q, func(id TaskID) bool { t := tt.all[id]; return t == nil || t.Status != TaskPending })
		if len(q) == 0 {
			delete(tt.pending, c)
		} else {
			tt.pending[c] = q
		}
	}
}

func pendingFailure(alive bool) string {
	if !alive {
		return "the client holding the source replica is gone"
	}
	return "pending timeout"
}

func processingFailure(alive bool) string {
	if !alive {
		return "the client executing the task is gone"
	}
	return "processing timeout"
}
