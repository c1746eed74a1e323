//go:build race

package cli

// raceEnabled makes the process test build its binary with -race too, so the
// build reuses the race-instrumented packages the test run compiled.
const raceEnabled = true
