package conductor

import "strings"

// Tier is a storage tier of the index: G1 device, G2 host, G3 disk.
type Tier uint8

// Tiers, in the order a prefix is matched.
const (
	TierDevice Tier = iota // G1: GPU / NPU / HBM blocks of an engine
	TierHost               // G2: host DRAM, pinned CPU memory, a memory pool
	TierDisk               // G3: SSD, 3FS, DFS, NFS, remote storage
	numTiers
)

// String is the tier's name in query answers: GPU, CPU, DISK.
func (t Tier) String() string {
	switch t {
	case TierDevice:
		return "GPU"
	case TierHost:
		return "CPU"
	case TierDisk:
		return "DISK"
	}
	return "?"
}

// ParseMedium maps a published medium to its tier. Engines name media
// freely (vLLM "GPU", "CPU"; SGLang "GPU", "CPU_PINNED", "DISK",
// "EXTERNAL"; Mooncake's master "cpu", "disk"); the match is by case-folded
// prefix: gpu/cuda/npu/hbm/device/xpu are the device, cpu/host/dram/mem the
// host, disk/ssd/nvme/3fs/dfs/nfs/file/external/remote the disk. An empty
// medium is the device (vLLM's older events have none: they are the
// engine's own cache). Unknown media report false.
func ParseMedium(m string) (Tier, bool) {
	s := strings.ToLower(strings.TrimSpace(m))
	if s == "" {
		return TierDevice, true
	}
	for _, p := range []string{"gpu", "cuda", "npu", "hbm", "device", "xpu", "g1", "l1"} {
		if strings.HasPrefix(s, p) {
			return TierDevice, true
		}
	}
	for _, p := range []string{"cpu", "host", "dram", "mem", "g2", "l2"} {
		if strings.HasPrefix(s, p) {
			return TierHost, true
		}
	}
	for _, p := range []string{"disk", "ssd", "nvme", "3fs", "dfs", "nfs", "file", "external", "remote", "g3", "l3"} {
		if strings.HasPrefix(s, p) {
			return TierDisk, true
		}
	}
	return 0, false
}
