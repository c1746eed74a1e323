package masterserver

import (
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
)

func newFakeClock() *clock.Fake { return clock.NewFake(time.Unix(1_700_000_000, 0)) }
