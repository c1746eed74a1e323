package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestHandles(t *testing.T) {
	h := newHandles[string]()
	a := h.add("a")
	b := h.add("b")
	if a <= 0 || b <= 0 || a == b {
		t.Fatalf("ids %d %d: want distinct positive", a, b)
	}
	if v, ok := h.get(a); !ok || v != "a" {
		t.Fatalf("get(a) = %q %v", v, ok)
	}
	if _, ok := h.get(0); ok {
		t.Fatal("id 0 must never be valid")
	}
	if v, ok := h.remove(a); !ok || v != "a" {
		t.Fatalf("remove(a) = %q %v", v, ok)
	}
	if _, ok := h.remove(a); ok {
		t.Fatal("second remove must fail")
	}
	if c := h.add("c"); c == a {
		t.Fatal("ids must not be reused")
	}
	if h.len() != 2 {
		t.Fatalf("len %d, want 2", h.len())
	}
}

func TestHandlesConcurrent(t *testing.T) {
	h := newHandles[int]()
	var wg sync.WaitGroup
	ids := make([][]int64, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 100 {
				id := h.add(i)
				ids[g] = append(ids[g], id)
				if v, ok := h.get(id); !ok || v != i {
					t.Errorf("get %d = %d %v", id, v, ok)
				}
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, l := range ids {
		for _, id := range l {
			if seen[id] {
				t.Fatalf("duplicate id %d", id)
			}
			seen[id] = true
		}
	}
}

func TestRegions(t *testing.T) {
	var s regions
	for _, r := range []region{{1000, 100}, {2000, 50}, {1100, 10}} {
		if err := s.add(r.addr, r.length); err != nil {
			t.Fatalf("add %v: %v", r, err)
		}
	}
	bad := []struct {
		name         string
		addr, length uint64
	}{
		{"zero length", 3000, 0},
		{"null", 0, 10},
		{"overflow", ^uint64(0) - 5, 10},
		{"overlap start", 990, 20},
		{"overlap end", 1050, 100},
		{"inside", 1010, 10},
		{"covering", 900, 2000},
		{"same", 2000, 50},
	}
	for _, tc := range bad {
		t.Run("add "+tc.name, func(t *testing.T) {
			err := s.add(tc.addr, tc.length)
			if !errors.Is(err, errInvalidParams) {
				t.Fatalf("add(%d,%d) = %v, want invalid params", tc.addr, tc.length, err)
			}
		})
	}
	contains := []struct {
		name         string
		addr, length uint64
		want         bool
	}{
		{"exact", 1000, 100, true},
		{"inside", 1010, 20, true},
		{"last byte", 1099, 1, true},
		{"adjacent buffers", 1090, 20, false},
		{"second", 1100, 10, true},
		{"before", 999, 2, false},
		{"after end", 2050, 1, false},
		{"past end", 2040, 11, false},
		{"gap", 1500, 1, false},
		{"zero length", 1000, 0, false},
		{"overflow", 1000, ^uint64(0), false},
	}
	for _, tc := range contains {
		t.Run("contains "+tc.name, func(t *testing.T) {
			if got := s.contains(tc.addr, tc.length); got != tc.want {
				t.Fatalf("contains(%d,%d) = %v, want %v", tc.addr, tc.length, got, tc.want)
			}
		})
	}
	if n, ok := s.remove(1100); !ok || n != 10 {
		t.Fatalf("remove = %d %v", n, ok)
	}
	if _, ok := s.remove(1100); ok {
		t.Fatal("second remove must fail")
	}
	if _, ok := s.remove(1001); ok {
		t.Fatal("remove of a non-start address must fail")
	}
	if s.contains(1100, 1) {
		t.Fatal("removed range still contained")
	}
	if got := s.all(); len(got) != 2 || got[0].addr != 1000 || got[1].addr != 2000 {
		t.Fatalf("all = %v", got)
	}
}

type codedErr struct{ c int }

func (e codedErr) Error() string     { return fmt.Sprintf("coded %d", e.c) }
func (e codedErr) MooncakeCode() int { return e.c }

func TestCodeOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int64
	}{
		{"nil", nil, 0},
		{"unknown", errors.New("boom"), codeInternal},
		{"invalid", errInvalid("x"), codeInvalidParams},
		{"wrapped handle", fmt.Errorf("op: %w", errBadHandle), codeInvalidParams},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), codeRPCTimeout},
		{"coder", fmt.Errorf("x: %w", codedErr{-706}), -706},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := codeOf(tc.err); got != tc.want {
				t.Fatalf("codeOf(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

func TestGuard(t *testing.T) {
	if rc := guard("ok", func() (int64, error) { return 7, nil }); rc != 7 {
		t.Fatalf("ok: %d", rc)
	}
	if rc := guard("err", func() (int64, error) { return 0, errInvalid("bad key") }); rc != codeInvalidParams {
		t.Fatalf("err: %d", rc)
	}
	if !strings.Contains(lastError(), "bad key") {
		t.Fatalf("last error %q lacks the reason", lastError())
	}
	rc := guard("panic", func() (int64, error) {
		var m map[string]int
		m["x"] = 1 // nil map write panics
		return 0, nil
	})
	if rc != codeInternal {
		t.Fatalf("panic: %d", rc)
	}
	if !strings.Contains(lastError(), "panic") {
		t.Fatalf("last error %q lacks the panic", lastError())
	}
	// An error carrying a non-negative code must still fail.
	if rc := guard("zero", func() (int64, error) { return 5, codedErr{0} }); rc >= 0 {
		t.Fatalf("error with code 0 returned %d", rc)
	}
}
