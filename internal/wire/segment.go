package wire

import (
	"encoding/json"
	"fmt"
)

// SegmentKeyPrefix is where segment descriptors live in a metadata store.
const SegmentKeyPrefix = "mooncake/ram/"

// SegmentKey is the metadata key of a segment's descriptor.
func SegmentKey(name string) string { return SegmentKeyPrefix + name }

// Buffer is one registered buffer in a segment descriptor.
type Buffer struct {
	Name      string `json:"name"`
	Addr      uint64 `json:"addr"`
	Length    uint64 `json:"length"`
	Location  string `json:"location,omitempty"`
	Shareable bool   `json:"shareable,omitempty"`
	ID        uint64 `json:"id,omitempty"`
	// CUDAIPC is, for GPU memory, the hex CUDA IPC handle of the allocation
	// holding the buffer, and AllocBase that allocation's base address:
	// same-host peers open it and copy device to device.
	CUDAIPC   string `json:"cuda_ipc,omitempty"`
	AllocBase uint64 `json:"alloc_base,omitempty"`
}

// Segment describes a peer engine and its registered buffers.
type Segment struct {
	Name            string   `json:"name"`
	Protocol        string   `json:"protocol"`
	IP              string   `json:"ip"`
	RPCPort         int      `json:"rpc_port"`
	TCPDataPort     int      `json:"tcp_data_port"`
	TCPProtoVersion int      `json:"tcp_proto_version"`
	Timestamp       string   `json:"timestamp"`
	Buffers         []Buffer `json:"buffers"`
	HostID          string   `json:"host_id,omitempty"`
	ShmSocket       string   `json:"shm_socket,omitempty"`
	PID             int      `json:"pid,omitempty"`
}

// MaxBuffers bounds the number of buffers a descriptor may list.
const MaxBuffers = 1 << 16

// Validate rejects descriptors Mooncake would reject, and nonsense.
func (s *Segment) Validate() error {
	if s.Name == "" || len(s.Name) > 512 {
		return fmt.Errorf("%w: segment name %q", ErrBadFrame, s.Name)
	}
	if s.RPCPort < 0 || s.RPCPort > 65535 || s.TCPDataPort < 0 || s.TCPDataPort > 65535 {
		return fmt.Errorf("%w: port out of range", ErrBadFrame)
	}
	if len(s.Buffers) > MaxBuffers {
		return fmt.Errorf("%w: %d buffers", ErrBadFrame, len(s.Buffers))
	}
	for i, b := range s.Buffers {
		if b.Name == "" || b.Addr == 0 || b.Length == 0 || b.Addr+b.Length < b.Addr {
			return fmt.Errorf("%w: buffer %d (%q %#x+%d)", ErrBadFrame, i, b.Name, b.Addr, b.Length)
		}
	}
	return nil
}

// DecodeSegment parses and validates a segment descriptor.
func DecodeSegment(b []byte) (Segment, error) {
	var s Segment
	if err := json.Unmarshal(b, &s); err != nil {
		return Segment{}, fmt.Errorf("%w: segment: %v", ErrBadFrame, err)
	}
	if err := s.Validate(); err != nil {
		return Segment{}, err
	}
	return s, nil
}
