package master

import (
	"fmt"
	"runtime/metrics"
	"sync"
	"time"
)

// MemoryLimit bounds the master's own memory (Config.Memory): a put of a
// new object is refused with ErrNoSpace while the master's live heap is
// above Admit of Max bytes, so that a flood of objects (long keys, many
// small values) meets a clear refusal instead of the kernel's OOM killer.
// Objects already stored stay readable and removable; puts succeed again
// once removals or evictions bring the heap back under the mark.
type MemoryLimit struct {
	Max   uint64  // bytes; 0 = no limit
	Admit float64 // fraction of Max above which new objects are refused (0.8)
	// Usage reports the bytes the master uses (nil: the memory the Go
	// runtime holds from the OS, heap, stacks and its own metadata, less
	// its free heap; read at most every 10 ms). Tests inject it.
	Usage func() uint64
}

// defaultMemoryAdmit leaves a fifth of the limit to what is not the object
// table: goroutine stacks, RPC buffers, the garbage between two GCs.
const defaultMemoryAdmit = 0.8

// memGauge caches one reading of the runtime's live heap.
type memGauge struct {
	mu     sync.Mutex
	at     time.Time
	bytes  uint64
	sample []metrics.Sample
}

var runtimeHeap memGauge

// live returns the memory the Go runtime holds from the OS less the free
// heap it released or can reuse (about the process's RSS without its code
// and free pages), re-read at most every 10 ms.
func (g *memGauge) live() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := time.Now(); now.Sub(g.at) >= 10*time.Millisecond {
		if g.sample == nil {
			g.sample = []metrics.Sample{{Name: "/memory/classes/total:bytes"},
				{Name: "/memory/classes/heap/released:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
		}
		metrics.Read(g.sample)
		var v [3]uint64
		for i, s := range g.sample {
			if s.Value.Kind() == metrics.KindUint64 {
				v[i] = s.Value.Uint64()
			}
		}
		g.bytes = v[0] - min(v[0], v[1]+v[2])
		g.at = now
	}
	return g.bytes
}

// memoryAdmitLocked refuses a new object while the master's memory is above
// the admission mark of Config.Memory.
func (m *Master) memoryAdmitLocked() error {
	lim := m.cfg.Memory
	if lim.Max == 0 {
		return nil
	}
	usage := lim.Usage
	if usage == nil {
		usage = runtimeHeap.live
	}
	admit := lim.Admit
	if admit <= 0 || admit > 1 {
		admit = defaultMemoryAdmit
	}
	mark := uint64(float64(lim.Max) * admit)
	if used := usage(); used > mark {
		return fmt.Errorf("%w: master memory limit: %d bytes in use, new objects refused above %d (--max-memory %d)", ErrNoSpace, used, mark, lim.Max)
	}
	return nil
}
