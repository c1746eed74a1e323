//go:build race

package master

// raceEnabled: the race detector is on (memory figures would be distorted).
const raceEnabled = true
