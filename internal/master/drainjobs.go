package master

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Drain jobs (Mooncake's master drain control plane): a job empties storage
// segments by moving each object's replica on them to target segments with
// the copy/move task machinery, at most MaxConcurrency moves at a time. From
// the job's start its segments take no new replicas (puts preferring them
// land elsewhere); when every move has succeeded the segments are DRAINED
// and their clients may leave without losing a value.

// DrainJobStatus is a drain job's state (Mooncake's names via String).
type DrainJobStatus int

const (
	DrainRunning DrainJobStatus = iota
	DrainSucceeded
	DrainFailed
)

func (s DrainJobStatus) String() string {
	return [...]string{"RUNNING", "SUCCEEDED", "FAILED"}[s]
}

// drainUnitAttempts bounds the moves tried for one object.
const drainUnitAttempts = 3

// DrainJob is a drain job's progress.
type DrainJob struct {
	ID                                                   string
	Segments, Targets                                    []string
	MaxConcurrency                                       int
	Status                                               DrainJobStatus
	TotalUnits, ActiveUnits, SucceededUnits, FailedUnits int
	Message                                              string
	Created, Updated                                     time.Time
}

type drainUnit struct {
	key, source string
	task        TaskID
	active      bool
	done        bool // moved, gone meanwhile, or failed
	failed      bool
	attempts    int
}

type drainJob struct {
	DrainJob
	units []*drainUnit
	next  int // round-robin over Targets
}

type drainTable struct {
	jobs     map[string]*drainJob
	segments map[string]string // segment name -> id of the job draining it (kept after success: DRAINED)
	seq      int
}

func (m *Master) drainsLocked() *drainTable {
	if m.drains == nil {
		m.drains = &drainTable{jobs: map[string]*drainJob{}, segments: map[string]string{}}
	}
	return m.drains
}

// evacuatingLocked reports a segment a drain job empties (no new replicas).
func (m *Master) evacuatingLocked(s *segment) bool {
	if m.drains == nil {
		return false
	}
	_, ok := m.drains.segments[s.spec.Name]
	return ok
}

// CreateDrainJob starts draining segments (by name) into targets (by name;
// none: any other segment, chosen by placement, through a copy task). Every
// named segment must be mounted and not in another job; maxConcurrency <= 0
// means 1.
func (m *Master) CreateDrainJob(segments, targets []string, maxConcurrency int) (string, error) {
	if len(segments) == 0 {
		return "", fmt.Errorf("%w: a drain job needs segments", ErrInvalidParams)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	dt := m.drainsLocked()
	for _, name := range segments {
		if len(m.namedLocked(name)) == 0 {
			return "", fmt.Errorf("%w: %q", ErrSegmentNotFound, name)
		}
		if id, ok := dt.segments[name]; ok && dt.jobs[id].Status == DrainRunning {
			return "", fmt.Errorf("%w: segment %q is in drain job %s", ErrInvalidParams, name, id)
		}
	}
	for _, name := range targets {
		if slices.Contains(segments, name) {
			return "", fmt.Errorf("%w: segment %q is both drained and a target", ErrInvalidParams, name)
		}
		if len(m.namedLocked(name)) == 0 {
			return "", fmt.Errorf("%w: target %q", ErrSegmentNotFound, name)
		}
	}
	now := m.clock.Now()
	dt.seq++
	j := &drainJob{DrainJob: DrainJob{ID: "drain-" + strconv.Itoa(dt.seq), Segments: slices.Clone(segments),
		Targets: slices.Clone(targets), MaxConcurrency: max(maxConcurrency, 1), Created: now, Updated: now}}
	for _, name := range segments {
		dt.segments[name] = j.ID
		for _, s := range m.namedLocked(name) {
			for _, id := range s.objects {
				if o := m.objects.at(id); o.complete {
					j.units = append(j.units, &drainUnit{key: m.keyOf(o), source: name})
				}
			}
		}
	}
	slices.SortFunc(j.units, func(a, b *drainUnit) int {
		if a.key < b.key {
			return -1
		}
		if a.key > b.key {
			return 1
		}
		return 0
	})
	j.TotalUnits = len(j.units)
	dt.jobs[j.ID] = j
	m.advanceDrainLocked(j, now)
	return j.ID, nil
}

// DrainJobInfo returns a job's progress.
func (m *Master) DrainJobInfo(id string) (DrainJob, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.drainsLocked().jobs[id]
	if j == nil {
		return DrainJob{}, fmt.Errorf("%w: drain job %q", ErrInvalidParams, id)
	}
	m.advanceDrainLocked(j, m.clock.Now())
	out := j.DrainJob
	out.Segments, out.Targets = slices.Clone(j.Segments), slices.Clone(j.Targets)
	return out, nil
}

// SegmentDrainStatus is "DRAINING" or "DRAINED" for a segment in a drain
// job (running or succeeded), "FAILED" for one whose job failed, "OK"
// otherwise; ErrSegmentNotFound for an unknown name.
func (m *Master) SegmentDrainStatus(name string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dt := m.drainsLocked()
	id, ok := dt.segments[name]
	if !ok {
		if len(m.namedLocked(name)) == 0 {
			return "", fmt.Errorf("%w: %q", ErrSegmentNotFound, name)
		}
		return "OK", nil
	}
	j := dt.jobs[id]
	m.advanceDrainLocked(j, m.clock.Now())
	switch j.Status {
	case DrainSucceeded:
		return "DRAINED", nil
	case DrainFailed:
		return "FAILED", nil
	}
	return "DRAINING", nil
}

// advanceDrainJobsLocked moves every running job on (Tick).
func (m *Master) advanceDrainJobsLocked(now time.Time) {
	if m.drains == nil {
		return
	}
	for _, j := range m.drains.jobs {
		m.advanceDrainLocked(j, now)
	}
}

// advanceDrainLocked records finished moves and starts the next ones.
func (m *Master) advanceDrainLocked(j *drainJob, now time.Time) {
	if j.Status != DrainRunning {
		return
	}
	tt := m.tasksLocked()
	onSource := func(u *drainUnit) bool {
		o := m.objects.get(u.key)
		return o != nil && o.complete && slices.ContainsFunc(m.reps(o), func(r replica) bool { return m.segOf(r).spec.Name == u.source })
	}
	fail := func(u *drainUnit, msg string) {
		if u.attempts >= drainUnitAttempts {
			u.done, u.failed = true, true
			j.Message = msg
		}
	}
	active := 0
	for _, u := range j.units {
		if !u.active {
			continue
		}
		switch t := tt.all[u.task]; {
		case t == nil:
			u.active = false
			fail(u, fmt.Sprintf("move of %q: task forgotten", u.key))
		case t.Status == TaskFailed:
			u.active = false
			fail(u, fmt.Sprintf("move of %q failed: %s", u.key, t.Message))
		case t.Status == TaskSuccess:
			u.active, u.done = false, true
		default:
			active++
		}
	}
	for _, u := range j.units {
		if active >= j.MaxConcurrency {
			break
		}
		if u.active || u.done {
			continue
		}
		if !onSource(u) {
			u.done = true // removed or evicted meanwhile: nothing left to move
			continue
		}
		u.attempts++
		o := m.objects.get(u.key)
		id, err := m.drainMoveLocked(j, o, u.source)
		if err != nil {
			fail(u, err.Error())
			continue
		}
		u.task, u.active = id, true
		active++
	}
	succeeded, failed := 0, 0
	for _, u := range j.units {
		switch {
		case u.failed:
			failed++
		case u.done:
			succeeded++
		}
	}
	j.ActiveUnits, j.SucceededUnits, j.FailedUnits = active, succeeded, failed
	j.Updated = now
	if active == 0 && succeeded+failed == len(j.units) {
		if failed > 0 {
			j.Status = DrainFailed
		} else {
			j.Status = DrainSucceeded
		}
	}
}

// drainMoveLocked submits the move of o's replica on source to the job's
// next target holding no replica of o.
func (m *Master) drainMoveLocked(j *drainJob, o *object, source string) (TaskID, error) {
	key, reps := m.keyOf(o), m.reps(o)
	holds := func(name string) bool {
		return slices.ContainsFunc(reps, func(r replica) bool { return m.segOf(r).spec.Name == name })
	}
	i := slices.IndexFunc(reps, func(r replica) bool { return m.segOf(r).spec.Name == source })
	src := m.segOf(reps[i])
	for range j.Targets {
		target := j.Targets[j.next%len(j.Targets)]
		j.next++
		if holds(target) {
			continue
		}
		if err := m.taskTargetLocked(key, target); err != nil {
			continue
		}
		return m.submitLocked(TaskMove, key, src, []string{target})
	}
	if len(j.Targets) == 0 {
		for _, s := range m.segOrder {
			if s.spec.Name == source || s.draining || m.evacuatingLocked(s) || holds(s.spec.Name) {
				continue
			}
			return m.submitLocked(TaskMove, key, src, []string{s.spec.Name})
		}
	}
	return TaskID{}, fmt.Errorf("%w: no target segment for %q", ErrNoSpace, key)
}
