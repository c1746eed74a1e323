package store

import (
	"context"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// TestStagingWaitsForRoom: a take that does not fit waits until a piece
// is put back; a put back with nobody waiting makes no channel (the put
// path allocates nothing for a waiter that does not exist); a waiting
// take ends with its ctx.
func TestStagingWaitsForRoom(t *testing.T) {
	s := newStaging(make([]byte, 4096))
	a, err := s.take(context.Background(), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		s.put(a[:64])
		if a2, err := s.take(context.Background(), 64); err != nil || &a2[0] != &a[0] {
			t.Fatalf("take after a put back: %v", err)
		}
	}); allocs != 0 {
		t.Fatalf("put back and take with nobody waiting: %.1f allocations", allocs)
	}
	waiting := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.changed != nil
	}
	if waiting() {
		t.Fatal("a channel was made with nobody waiting")
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := s.take(ctx, 1024)
		if err == nil {
			s.put(b)
		}
		got <- err
	}()
	waitfor.Cond(t, 10*time.Second, "the take waits for room", waiting)
	s.put(a)
	if err := <-got; err != nil {
		t.Fatalf("waiting take: %v", err)
	}
	if waiting() {
		t.Fatal("the put back left a channel behind")
	}

	full, err := s.take(context.Background(), 4096)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.take(ctx, 64); err == nil {
		t.Fatal("a take with no room outlived its ctx")
	}
	s.put(full)
	if b, err := s.take(context.Background(), 4096); err != nil || len(b) != 4096 {
		t.Fatalf("take of the whole buffer after the put back: %v", err)
	}
}
