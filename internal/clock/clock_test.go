package clock

import (
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	if !f.Now().Equal(start) {
		t.Fatalf("Now = %v, want %v", f.Now(), start)
	}
	f.Advance(3 * time.Second)
	if got := f.Now().Sub(start); got != 3*time.Second {
		t.Fatalf("after Advance(3s) elapsed %v", got)
	}
	f.Set(start)
	if !f.Now().Equal(start) {
		t.Fatalf("Set did not move the clock back")
	}
}

func TestOr(t *testing.T) {
	if _, ok := Or(nil).(Real); !ok {
		t.Fatalf("Or(nil) is not the real clock")
	}
	f := &Fake{}
	if Or(f) != Clock(f) {
		t.Fatalf("Or(f) did not keep f")
	}
	if d := time.Since(Real{}.Now()); d < 0 || d > time.Minute {
		t.Fatalf("real clock off by %v", d)
	}
}
