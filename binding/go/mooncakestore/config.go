package mooncakestore

// ReplicateConfig controls replica placement for put operations.
type ReplicateConfig struct {
	ReplicaNum        int
	WithSoftPin       bool
	WithHardPin       bool
	PreferredSegments []string
}

// DefaultReplicateConfig returns the default configuration (1 replica, no pinning).
func DefaultReplicateConfig() ReplicateConfig {
	return ReplicateConfig{ReplicaNum: 1}
}
