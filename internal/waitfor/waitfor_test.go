package waitfor

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	var n atomic.Int32
	if !Within(time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("condition true on the third poll was not seen")
	}
	if Within(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds reported true")
	}
}
