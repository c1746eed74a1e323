package kvleak

import (
	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// IgnoreZMQ returns one goleak.IgnoreAnyFunction per function of
// kvevents.ZMQLeakFuncs.
func IgnoreZMQ() []goleak.Option {
	var ignore []goleak.Option
	for _, f := range kvevents.ZMQLeakFuncs() {
		ignore = append(ignore, goleak.IgnoreAnyFunction(f))
	}
	return ignore
}
