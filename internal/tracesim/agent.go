package tracesim

import (
	"math"
	"math/rand/v2"
	"slices"
)

// AgentShape describes a tool-agent workload: tasks, each on one of a few
// shared tool prompts, run a loop of steps, and every step's prompt is
// the previous one plus a tool result. Its statistics differ from the
// conversation trace's on purpose (shared prefixes reused by many tasks,
// many short-gapped steps instead of few turns minutes apart), so a cache
// policy can be judged on a workload it was not designed on.
type AgentShape struct {
	Tasks        int     // tasks in the trace
	TasksPerSec  float64 // Poisson arrival rate of tasks
	Tools        int     // distinct tool prompts (shared prefixes)
	ToolZipf     float64 // Zipf exponent of tool popularity (> 1)
	ToolBlocks   [2]int  // tool prompt length in blocks, uniform in [min, max]
	MeanSteps    float64 // steps per task, geometric with this mean
	MaxSteps     int
	ResultBlocks [2]int  // blocks a step adds (tool result), uniform in [min, max]
	ThinkSec     float64 // mean gap between a task's steps, exponential
	OutputTokens [2]int  // output length, uniform in [min, max]
}

// DefaultAgentShape is the shape `mooncake bench trace --synthetic agent`
// replays: 4,000 tasks at 2 per second (about half an hour), 200 tools of
// 4 to 64 blocks with Zipf(1.1) popularity, 8 steps per task on average (at
// most 40), tool results of 1 to 8 blocks, 20 s between steps: a few
// hundred tasks in flight, whose contexts span the capacities of the
// cache policy table (1,000 to 20,000 blocks).
func DefaultAgentShape() AgentShape {
	return AgentShape{Tasks: 4000, TasksPerSec: 2, Tools: 200, ToolZipf: 1.1, ToolBlocks: [2]int{4, 64},
		MeanSteps: 8, MaxSteps: 40, ResultBlocks: [2]int{1, 8}, ThinkSec: 20, OutputTokens: [2]int{20, 400}}
}

// GenerateAgent returns a trace of shape s drawn with seed (the same seed
// gives the same trace), in timestamp order. Like the Mooncake traces, a
// prompt's last block is partial (input_length is not a multiple of
// BlockTokens), so the next step has a new block at that position.
func GenerateAgent(s AgentShape, seed uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, 0x6167656e74))
	uni := func(r [2]int) int { return r[0] + rng.IntN(r[1]-r[0]+1) }
	next := int64(0)
	fresh := func(n int) []int64 {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = next
			next++
		}
		return ids
	}
	tools := make([][]int64, s.Tools)
	for i := range tools {
		tools[i] = fresh(uni(s.ToolBlocks))
	}
	zipf := rand.NewZipf(rng, s.ToolZipf, 1, uint64(s.Tools-1))
	var out []Request
	start := 0.0
	for range s.Tasks {
		start += rng.ExpFloat64() / s.TasksPerSec
		steps := 1 + int(math.Floor(math.Log(1-rng.Float64())/math.Log(1-1/s.MeanSteps)))
		steps = min(max(steps, 1), s.MaxSteps)
		full := slices.Clone(tools[zipf.Uint64()]) // full blocks of the prompt so far
		at := start
		for range steps {
			add := fresh(uni(s.ResultBlocks))
			ids := append(slices.Clone(full), add...)
			in := int64(len(ids))*BlockTokens - int64(1+rng.IntN(BlockTokens-1))
			out = append(out, Request{Timestamp: int64(at * 1000), InputLength: in, OutputLength: int64(uni(s.OutputTokens)), HashIDs: ids})
			full = ids[:len(ids)-1] // the partial last block changes with the next step
			at += rng.ExpFloat64() * s.ThinkSec
		}
	}
	return Ordered(out)
}
