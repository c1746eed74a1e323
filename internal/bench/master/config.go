package master

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
)

// Phases, in the order they run (Config.Phases). The load phase always
// runs first: every other phase needs the pool it fills.
const (
	PhaseLoad      = "load"
	PhaseOps       = "ops"
	PhaseBulk      = "bulk"
	PhaseRemove    = "remove"
	PhaseRestart   = "restart"
	PhaseFailover  = "failover"
	PhaseRemoveAll = "removeall"
	PhaseClients   = "clients"
)

// AllPhases lists every phase in run order.
var AllPhases = []string{PhaseLoad, PhaseOps, PhaseBulk, PhaseRemove, PhaseRestart, PhaseFailover, PhaseRemoveAll, PhaseClients}

// How the failover phase stops the leader (Config.FailoverSignal).
const (
	FailoverKill = "kill" // SIGKILL: a crash; a new standby is started after
	FailoverStop = "stop" // SIGSTOP: a hung leader; SIGCONT after, and it must step down
)

// Workload constants of the phases.
const (
	LoadBatch   = 512   // keys per BatchPut (Redis: pipeline depth) in the load phase
	ExistBatch  = 1000  // keys per BatchExist when counting objects
	ListPage    = 10000 // keys per List page (Redis: SCAN COUNT)
	OpsClients  = 8     // clients of the get/put load (ops, bulk, removeall)
	OpsSize     = 4096  // value size of the get/put load
	OpsKeys     = 64    // keys per client and kind (get keys, put keys) of the get/put load
	WorkerKeys  = 16    // keys per client and kind in the clients phase
	KeyFormat   = "obj/%09d"
	keyLen      = 13 // len(fmt.Sprintf(KeyFormat, i)) for i < 1e9
	probeKey    = "probe/first-op"
	opsPrefix   = "ops"
	segmentPad  = 64 << 20
	segmentFill = 0.8 // segments are sized so that the pool is at most this full (eviction starts at 0.9)
)

// Config is one run of the benchmark.
type Config struct {
	Binary    string        // the mooncake binary: `mooncake master`, `mooncake store` and the workers
	Objects   int           // N: objects loaded into the pool
	Clients   int           // C: clients loading the pool in parallel
	ValueSize int           // bytes per loaded object
	Duration  time.Duration // duration of each timed load phase (ops, clients; the minimum of bulk)
	Nodes     int           // storage node processes
	Phases    []string      // phases to run (load always runs); nil: all
	// Baseline is the object count of a fresh pool on which the ops phase
	// runs first, the peer of "ops/s at N" (0: none).
	Baseline int
	// Redis is "auto" (redis-server on a free loopback port when
	// installed), "off" or "" (none), or HOST:PORT of a running Redis
	// (flushed by the run).
	Redis string
	// Pin loads the objects, and the keys the get/put loads read,
	// hard-pinned (never evicted), so that an eviction the get/put load
	// triggers cannot empty the pool under the later phases
	// (Result.After shows evictions either way).
	Pin           bool
	Workers       int    // client processes of the clients phase
	WorkerClients int    // clients per worker process
	Probes        int    // new client processes timed to their first get (median)
	Transport     string // transfer transport: auto, tcp, shm
	// RPCTimeout is the control client's deadline of one master call (its
	// pages of List, RemoveByRegex, RemoveAll); 0: the store client's
	// default (5s).
	RPCTimeout     time.Duration
	PhaseTimeout   time.Duration // deadline of each phase
	RestoreTimeout time.Duration // deadline of the restart and failover phases' wait for every object

	// HA runs two `mooncake master --ha` candidates of one cluster on
	// Etcd, the nodes and clients addressing them as etcd://: the failover
	// phase runs instead of the restart phase.
	HA             bool
	Etcd           string        // with HA: "auto" (Debian's etcd on free loopback ports) or HOST:PORT[;HOST:PORT] of a running etcd
	HALease        time.Duration // with HA: the candidates' --ha-lease (whole seconds; etcd raises it to its minimum TTL, 2 s with Debian's defaults)
	FailoverSignal string        // with HA: FailoverKill or FailoverStop
}

// DefaultConfig returns the command's defaults.
func DefaultConfig() Config {
	return Config{Objects: 1_000_000, Clients: 8, ValueSize: 64, Duration: 5 * time.Second, Nodes: 1, Baseline: 10_000,
		Redis: "auto", Workers: 8, WorkerClients: 32, Probes: 5, Transport: "auto",
		PhaseTimeout: 10 * time.Minute, RestoreTimeout: 2 * time.Minute,
		Etcd: "auto", HALease: 5 * time.Second, FailoverSignal: FailoverKill}
}

// Validate checks the run before anything starts.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("bench master: no mooncake binary")
	case c.Objects < 1 || c.Objects >= 1e9:
		return fmt.Errorf("bench master: --objects %d: want 1..999999999", c.Objects)
	case c.Clients < 1 || c.Clients > 256:
		return fmt.Errorf("bench master: --clients %d: want 1..256", c.Clients)
	case c.ValueSize < 1 || c.ValueSize > 1<<20:
		return fmt.Errorf("bench master: --value-size %d: want 1..1MiB", c.ValueSize)
	case c.Duration <= 0, c.PhaseTimeout <= 0, c.RestoreTimeout <= 0, c.RPCTimeout < 0:
		return errors.New("bench master: --duration, --phase-timeout and --restore-timeout must be positive")
	case c.Nodes < 1 || c.Workers < 1 || c.WorkerClients < 1 || c.Probes < 0 || c.Baseline < 0:
		return errors.New("bench master: --nodes, --workers and --worker-clients must be positive, --probes and --baseline not negative")
	}
	for _, p := range c.Phases {
		if !slices.Contains(AllPhases, p) {
			return fmt.Errorf("bench master: unknown phase %q (want %s)", p, strings.Join(AllPhases, ","))
		}
		if p == PhaseFailover && !c.HA {
			return errors.New("bench master: the failover phase needs --ha")
		}
		if p == PhaseRestart && c.HA {
			return errors.New("bench master: no restart phase with --ha (the failover phase replaces it)")
		}
	}
	if !c.HA {
		return nil
	}
	if c.Etcd != "auto" {
		for ep := range strings.FieldsFuncSeq(c.Etcd, func(r rune) bool { return r == ';' || r == ',' }) {
			if _, _, err := net.SplitHostPort(ep); err != nil {
				return fmt.Errorf("bench master: --etcd %q: want auto or HOST:PORT[;HOST:PORT]", c.Etcd)
			}
		}
	}
	switch {
	case c.Etcd == "":
		return errors.New("bench master: --ha needs --etcd auto or HOST:PORT[;HOST:PORT]")
	case c.HALease < time.Second || c.HALease%time.Second != 0:
		return fmt.Errorf("bench master: --ha-lease %v: want whole seconds, at least 1s", c.HALease)
	case c.FailoverSignal != FailoverKill && c.FailoverSignal != FailoverStop:
		return fmt.Errorf("bench master: --failover %q: want %s or %s", c.FailoverSignal, FailoverKill, FailoverStop)
	}
	return nil
}

// runs reports whether phase p is selected: the restart phase only
// without HA, the failover phase only with it.
func (c Config) runs(p string) bool {
	switch {
	case p == PhaseRestart && c.HA, p == PhaseFailover && !c.HA:
		return false
	}
	return p == PhaseLoad || len(c.Phases) == 0 || slices.Contains(c.Phases, p)
}

// ObjectBytes is the segment space one loaded object takes: its header
// (objheader, durable metadata) and value, rounded up to the allocator's
// 64 bytes.
func ObjectBytes(valueSize int) uint64 {
	return roundUp(objheader.Len(fmt.Sprintf(KeyFormat, 0))+uint64(valueSize), objheader.Align)
}

// SegmentSize is the segment of each of nodes storage nodes for objects
// loaded objects of valueSize bytes, the get/put load's keys and the
// clients phase's: all of it divided by segmentFill, plus segmentPad, in
// MiB.
func SegmentSize(objects, valueSize, nodes, workerClients int) uint64 {
	opsObj := roundUp(objheader.Len(opsKey(opsPrefix, "put", 0, 0))+OpsSize, objheader.Align)
	workerObj := roundUp(objheader.Len(opsKey(workerPrefix(0), "put", 0, 0))+OpsSize, objheader.Align)
	need := uint64(objects)*ObjectBytes(valueSize) + uint64(OpsClients*2*OpsKeys)*opsObj +
		uint64(workerClients*2*WorkerKeys)*workerObj + roundUp(objheader.Len(probeKey)+OpsSize, objheader.Align)
	per := uint64(float64(need)/segmentFill)/uint64(nodes) + segmentPad
	return roundUp(per, 1<<20)
}

func roundUp(v, a uint64) uint64 { return (v + a - 1) / a * a }

// workerPrefix is the key prefix of worker process id in the clients phase.
func workerPrefix(id int) string { return fmt.Sprintf("w/%03d", id) }

// loadBatch is the keys per BatchPut of the load phase: LoadBatch, fewer
// for large values (at most 4 MiB per call).
func loadBatch(valueSize int) int { return max(1, min(LoadBatch, (4<<20)/valueSize)) }

// key returns the i-th loaded key.
func key(i int) string { return fmt.Sprintf(KeyFormat, i) }
