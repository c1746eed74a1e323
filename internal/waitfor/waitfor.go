// Package waitfor is the project's one test polling helper: wait until a
// condition holds, with a deadline, instead of sleeping for readiness.
package waitfor

import (
	"testing"
	"time"
)

// Interval is how often a condition is polled.
const Interval = 5 * time.Millisecond

// Cond polls cond until it returns true and fails the test (naming what it
// waited for) if d passes first.
func Cond(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Within polls cond until it returns true or d passes, and reports which.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Interval)
	}
	return true
}
