package master

import "time"

// Result is one run's figures, one field per phase (nil: not run).
// Durations are nanoseconds in JSON.
type Result struct {
	Objects      int      `json:"objects"`
	Clients      int      `json:"clients"`
	ValueSize    int      `json:"value_size"`
	Pinned       bool     `json:"pinned"` // objects loaded hard-pinned (--pin)
	Nodes        int      `json:"nodes"`
	SegmentSize  uint64   `json:"segment_size"`
	ObjectBytes  uint64   `json:"object_bytes"` // segment bytes per loaded object (header + value, 64 B aligned)
	RedisSkipped string   `json:"redis_skipped,omitempty"`
	Failures     []string `json:"failures,omitempty"` // phases that could not finish, and why
	HA           *HASetup `json:"ha,omitempty"`       // --ha: the election the masters ran

	// After is the master's /api/summary after each phase: what a phase
	// left behind (objects, evictions, dropped clients) shows here.
	After []Snapshot `json:"after"`

	Load      *LoadResult      `json:"load,omitempty"`
	Baseline  *OpsFigures      `json:"baseline,omitempty"` // the ops phase on a fresh pool of BaselineObjects
	BaseN     int              `json:"baseline_objects,omitempty"`
	Ops       *OpsResult       `json:"ops,omitempty"`
	Bulk      *BulkResult      `json:"bulk,omitempty"`
	Remove    *RemoveResult    `json:"remove,omitempty"`
	Restart   *RestartResult   `json:"restart,omitempty"`
	Failover  *FailoverResult  `json:"failover,omitempty"`
	RemoveAll *RemoveAllResult `json:"removeall,omitempty"`
	ManyCl    *ClientsResult   `json:"many_clients,omitempty"`
}

// LoadResult is the load phase: N objects by BatchPut from C clients, and
// the master's memory per object; Redis the same keys by pipelined SETs.
type LoadResult struct {
	Puts          int           `json:"puts"`
	Errors        int           `json:"errors"`
	FirstErr      string        `json:"first_error,omitempty"`
	Elapsed       time.Duration `json:"elapsed_ns"`
	PutsPerSec    float64       `json:"puts_per_sec"`
	RSSBefore     uint64        `json:"master_rss_before"`
	RSSAfter      uint64        `json:"master_rss_after"`
	RSSPerObject  float64       `json:"master_rss_per_object"`
	HeapPerObject float64       `json:"master_heap_per_object,omitempty"` // go_memstats_heap_inuse_bytes delta / N (0: not exposed)
	HeapExposed   bool          `json:"master_heap_exposed"`
	Redis         *RedisLoad    `json:"redis,omitempty"`
}

// RedisLoad is the same load into Redis.
type RedisLoad struct {
	Elapsed     time.Duration `json:"elapsed_ns"`
	SetsPerSec  float64       `json:"sets_per_sec"`
	UsedBefore  uint64        `json:"used_memory_before"`
	UsedAfter   uint64        `json:"used_memory_after"`
	BytesPerKey float64       `json:"used_memory_per_key"`
}

// OpsResult is the get/put load at N, next to Redis holding N keys.
type OpsResult struct {
	Mooncake OpsFigures  `json:"mooncake"`
	Redis    *OpsFigures `json:"redis,omitempty"`
}

// BulkResult is the full listing under the get/put load.
type BulkResult struct {
	Listings     int           `json:"listings"`      // full listings run (at least one, repeated for --duration)
	Counted      []int         `json:"counted"`       // keys counted by each listing (each must be N)
	ListTime     time.Duration `json:"list_ns"`       // the first listing's time
	Load         OpsFigures    `json:"load"`          // the get/put load during the listings
	GetP99Ratio  float64       `json:"get_p99_ratio"` // get p99 during the listings / in the ops phase
	Polls        int           `json:"polls"`         // /api/summary + /dashboard/ polls
	PollErrors   int           `json:"poll_errors"`
	PollFirstErr string        `json:"poll_first_error,omitempty"`
	SummaryMax   time.Duration `json:"summary_max_ns"`   // slowest /api/summary
	DashboardMax time.Duration `json:"dashboard_max_ns"` // slowest /dashboard/
	NodesDropped uint64        `json:"nodes_dropped"`    // clients_dropped counter during the phase
	Segments     int           `json:"segments"`         // mounted segments after
	Present      int           `json:"present"`          // loaded keys found by BatchExist after
	Lost         int           `json:"lost"`
	Redis        *RedisBulk    `json:"redis,omitempty"`
}

// RedisBulk is SCAN of every key under the same load on Redis.
type RedisBulk struct {
	Counted  int           `json:"counted"`
	ListTime time.Duration `json:"list_ns"`
	Load     OpsFigures    `json:"load"`
}

// RemoveResult is RemoveByRegex of the even-numbered keys.
type RemoveResult struct {
	Pattern  string        `json:"pattern"`
	Want     int           `json:"want"`
	Removed  int           `json:"removed"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Err      string        `json:"error,omitempty"`
	ListLeft int           `json:"listed_after"` // loaded keys listed after the removal
}

// RestartResult is a SIGKILLed master replaced on the same ports.
type RestartResult struct {
	Want          int           `json:"want"`           // loaded objects present before the kill: all must come back
	Removed       bool          `json:"removed"`        // the remove phase ran before (Want is about N/2)
	Present       int           `json:"present"`        // of them, present when the wait ended
	Recovered     bool          `json:"recovered"`      // all Want present before the deadline
	Took          time.Duration `json:"recovery_ns"`    // from the kill to the last one present (or to the deadline)
	Up            time.Duration `json:"up_ns"`          // from the kill to the new master listening
	Mounted       time.Duration `json:"mounted_ns"`     // from the kill to every node's segment mounted on it (its remount began)
	Counted       time.Duration `json:"counted_ns"`     // from the kill to its /api/summary counting Want objects (0: not seen)
	NodeRemounts  []string      `json:"node_remounts"`  // each node's log line of its remount (its scan and send times)
	MasterRestore string        `json:"master_restore"` // the new master's log line of the last restore session it ended
	Deadline      time.Duration `json:"deadline_ns"`    // --restore-timeout
	RemovedBack   int           `json:"removed_back"`   // loaded objects absent before the kill (removed, evicted) present again (must be 0)
	RemovedTested int           `json:"removed_tested"` // loaded objects absent before the kill, checked
	RSSAfter      uint64        `json:"master_rss_after"`
	FirstErr      string        `json:"first_error,omitempty"`
	NodeLog       []string      `json:"node_log,omitempty"` // each node's last stderr line when not recovered
}

// HASetup is the election of an HA run.
type HASetup struct {
	Etcd       string        `json:"etcd"`    // endpoints
	Cluster    string        `json:"cluster"` // the cluster id of the candidates
	Lease      time.Duration `json:"lease_ns"`
	Candidates int           `json:"candidates"`
}

// FailoverResult is the HA leader stopped (SIGKILL or SIGSTOP) and the
// standby taking over.
type FailoverResult struct {
	Signal        string        `json:"signal"` // kill (SIGKILL) or stop (SIGSTOP, SIGCONT after)
	Lease         time.Duration `json:"lease_ns"`
	Want          int           `json:"want"`           // loaded objects present before: all must be back
	Removed       bool          `json:"removed"`        // the remove phase ran before (Want is about N/2)
	Election      time.Duration `json:"election_ns"`    // from the signal to the standby serving as leader (its /role)
	Remount       time.Duration `json:"remount_ns"`     // from the signal to every node's segment mounted on the new leader (its /api/summary)
	Took          time.Duration `json:"failover_ns"`    // from the signal to the last object present through the clients (or to the deadline)
	Counted       time.Duration `json:"counted_ns"`     // from the signal to the new leader's /api/summary counting Want objects (0: not seen)
	NodeRemounts  []string      `json:"node_remounts"`  // each node's log line of its remount (its scan and send times)
	MasterRestore string        `json:"master_restore"` // the new leader's log line of the last restore session it ended
	Present       int           `json:"present"`        // of Want, present when the wait ended
	Recovered     bool          `json:"recovered"`      // all Want present before the deadline
	Deadline      time.Duration `json:"deadline_ns"`    // --restore-timeout
	OldView       int64         `json:"old_view"`       // the view version of the stopped leader
	NewView       int64         `json:"new_view"`       // and of the new one
	RemovedBack   int           `json:"removed_back"`   // loaded objects absent before present again (must be 0)
	RemovedTested int           `json:"removed_tested"`
	OldLeader     string        `json:"old_leader,omitempty"`   // what became of the old leader after
	StepDown      time.Duration `json:"step_down_ns,omitempty"` // stop: from SIGCONT to the old leader reporting follower
	RSSAfter      uint64        `json:"master_rss_after"`       // the new leader's
	FirstErr      string        `json:"first_error,omitempty"`
	NodeLog       []string      `json:"node_log,omitempty"` // each node's last stderr line when not recovered
}

// RemoveAllResult is RemoveAll under the get/put load.
type RemoveAllResult struct {
	Removed      int           `json:"removed"`
	Want         int           `json:"want_at_least"` // loaded objects that were present
	Elapsed      time.Duration `json:"elapsed_ns"`
	Err          string        `json:"error,omitempty"`
	ListLeft     int           `json:"listed_after"`
	NodesDropped uint64        `json:"nodes_dropped"`
	Segments     int           `json:"segments"`
	Load         OpsFigures    `json:"load"`
	Redis        *RedisFlush   `json:"redis,omitempty"`
}

// RedisFlush is FLUSHALL of Redis's N keys.
type RedisFlush struct {
	Elapsed time.Duration `json:"elapsed_ns"`
}

// ClientsResult is the many-clients phase.
type ClientsResult struct {
	Processes     int             `json:"processes"`
	PerProcess    int             `json:"clients_per_process"`
	Load          OpsFigures      `json:"load"`
	FirstOp       []time.Duration `json:"first_op_ns"` // per probe process: start to first successful get
	FirstOpMedian time.Duration   `json:"first_op_median_ns"`
	Redis         *OpsFigures     `json:"redis,omitempty"` // the same clients as connections of this process
}

// Snapshot is the master's state after a phase (/api/summary).
type Snapshot struct {
	Phase          string `json:"phase"`
	Objects        int    `json:"objects"` // complete objects, loaded keys and others
	Segments       int    `json:"segments"`
	Clients        int    `json:"clients"`
	Used           uint64 `json:"used"`
	Capacity       uint64 `json:"capacity"`
	Evictions      uint64 `json:"evictions"`       // objects evicted since the master started
	ClientsDropped uint64 `json:"clients_dropped"` // since the master started
	PutsTimedOut   uint64 `json:"puts_timed_out"`
	EvictionRuns   uint64 `json:"eviction_runs"`
	// FirstEvictionUse is used/capacity when the first eviction ran (0:
	// none yet).
	FirstEvictionUse float64 `json:"utilisation_at_first_eviction"`
	Err              string  `json:"error,omitempty"` // the summary could not be read
}
