// Package inproc is the in-process transport: a directory (Hub) of engines
// by segment name, so that an engine can copy straight to and from another
// engine's registered memory in the same process (tests and the all-in-one
// mode). Every access is still bounds-checked by the target's registry.
//
// There is no process-wide hub: whoever builds the engines makes one with
// NewHub and gives it to every engine that should reach the others
// (transfer.Config.InprocHub).
package inproc

import (
	"fmt"
	"sync"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
)

// Memory is what a peer engine exposes in process.
type Memory interface {
	Acquire(addr, n uint64) (registry.Span, error)
}

// Hub maps segment names to in-process engines' memory. The zero value is
// an empty hub ready to use.
type Hub struct {
	mu   sync.RWMutex
	mems map[string]Memory
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{} }

// Add publishes mem under name.
func (h *Hub) Add(name string, mem Memory) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mems == nil {
		h.mems = map[string]Memory{}
	}
	if _, ok := h.mems[name]; ok {
		return fmt.Errorf("inproc: segment %q already in this process", name)
	}
	h.mems[name] = mem
	return nil
}

// Remove withdraws name.
func (h *Hub) Remove(name string) {
	h.mu.Lock()
	delete(h.mems, name)
	h.mu.Unlock()
}

// Lookup finds an in-process engine's memory.
func (h *Hub) Lookup(name string) (Memory, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	m, ok := h.mems[name]
	return m, ok
}

// Stager is a Memory with memory the host cannot touch (GPU memory), seen
// through host copies: the same contract as tcp.Stager.
type Stager interface {
	AcquireRead(addr, n uint64) (registry.Span, error)
	AcquireWrite(addr, n uint64) (span registry.Span, commit func() error, err error)
}

// Copy moves len(local) bytes between local and the peer's [remote, remote+len).
func Copy(mem Memory, write bool, local []byte, remote uint64) error {
	if st, ok := mem.(Stager); ok {
		return copyStaged(st, write, local, remote)
	}
	s, err := mem.Acquire(remote, uint64(len(local)))
	if err != nil {
		return err
	}
	if write {
		copy(s.B, local)
	} else {
		copy(local, s.B)
	}
	s.Release()
	return nil
}

func copyStaged(st Stager, write bool, local []byte, remote uint64) error {
	if !write {
		s, err := st.AcquireRead(remote, uint64(len(local)))
		if err != nil {
			return err
		}
		copy(local, s.B)
		s.Release()
		return nil
	}
	s, commit, err := st.AcquireWrite(remote, uint64(len(local)))
	if err != nil {
		return err
	}
	copy(s.B, local)
	if commit != nil {
		err = commit()
	}
	s.Release()
	return err
}

// CopyV moves every locals[i] between local memory and the peer's
// [remotes[i], remotes[i]+len(locals[i])) as one request: every range is
// acquired (bounds-checked) before any byte moves, so a range outside the
// peer's registered memory fails the whole request and touches nothing.
func CopyV(mem Memory, write bool, locals [][]byte, remotes []uint64) error {
	st, staged := mem.(Stager)
	spans := make([]registry.Span, 0, len(locals))
	commits := make([]func() error, 0, len(locals))
	defer func() {
		for _, s := range spans {
			s.Release()
		}
	}()
	for i, l := range locals {
		var s registry.Span
		var commit func() error
		var err error
		switch {
		case staged && write:
			s, commit, err = st.AcquireWrite(remotes[i], uint64(len(l)))
		case staged:
			s, err = st.AcquireRead(remotes[i], uint64(len(l)))
		default:
			s, err = mem.Acquire(remotes[i], uint64(len(l)))
		}
		if err != nil {
			return err
		}
		spans, commits = append(spans, s), append(commits, commit)
	}
	for i, l := range locals {
		if write {
			copy(spans[i].B, l)
		} else {
			copy(l, spans[i].B)
		}
	}
	for _, commit := range commits {
		if commit != nil {
			if err := commit(); err != nil {
				return err
			}
		}
	}
	return nil
}
