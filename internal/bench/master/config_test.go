package master

import (
	"slices"
	"testing"
	"time"
)

// TestRunsHA checks which phases run with and without HA: the failover
// phase only with it, the restart phase only without, load always.
func TestRunsHA(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ha     bool
		phases []string
		want   []string
	}{
		{"all", false, nil, []string{PhaseLoad, PhaseOps, PhaseBulk, PhaseRemove, PhaseRestart, PhaseRemoveAll, PhaseClients}},
		{"all ha", true, nil, []string{PhaseLoad, PhaseOps, PhaseBulk, PhaseRemove, PhaseFailover, PhaseRemoveAll, PhaseClients}},
		{"failover", true, []string{PhaseFailover}, []string{PhaseLoad, PhaseFailover}},
		{"remove", false, []string{PhaseRemove}, []string{PhaseLoad, PhaseRemove}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Binary, c.HA, c.Phases = "/bin/true", tc.ha, tc.phases
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range AllPhases {
				if c.runs(p) {
					got = append(got, p)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("runs %v, want %v", got, tc.want)
			}
		})
	}
}

// TestValidateHA checks the HA settings Validate refuses.
func TestValidateHA(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"failover without ha", func(c *Config) { c.Phases = []string{PhaseFailover} }},
		{"restart with ha", func(c *Config) { c.HA, c.Phases = true, []string{PhaseRestart} }},
		{"no etcd", func(c *Config) { c.HA, c.Etcd = true, "" }},
		{"bad etcd", func(c *Config) { c.HA, c.Etcd = true, "127.0.0.1:2379;x" }},
		{"lease under 1s", func(c *Config) { c.HA, c.HALease = true, 500*time.Millisecond }},
		{"lease not whole seconds", func(c *Config) { c.HA, c.HALease = true, 1500*time.Millisecond }},
		{"bad signal", func(c *Config) { c.HA, c.FailoverSignal = true, "term" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Binary = "/bin/true"
			tc.set(&c)
			if err := c.Validate(); err == nil {
				t.Fatalf("%+v: no error", c)
			}
		})
	}
	c := DefaultConfig()
	c.Binary, c.HA, c.Etcd, c.FailoverSignal = "/bin/true", true, "127.0.0.1:2379;127.0.0.2:2379", FailoverStop
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
