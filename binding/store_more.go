package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// This file holds the store calls Mooncake's Python class has beyond the
// first binding (store.go): puts that carry every ReplicateConfig field the
// Go client understands (upsert, soft-pin action and TTL), batch remove,
// replica descriptors and the client's hostname.

// putConfigJSON is the ReplicateConfig the Python layer sends to the
// put_ex family. Fields the Go client has no counterpart for (disk and NoF
// replica counts, data type, group ids) are logged by Python and not sent.
type putConfigJSON struct {
	ReplicaNum        int      `json:"replica_num"`
	SoftPin           bool     `json:"soft_pin"`
	SoftPinTTLMs      int64    `json:"soft_pin_ttl_ms"`
	HardPin           bool     `json:"with_hard_pin"`
	PreferredSegments []string `json:"preferred_segments"`
	SameNode          bool     `json:"prefer_alloc_in_same_node"`
	Upsert            bool     `json:"upsert"`
	KeepSoftPin       bool     `json:"keep_soft_pin"` // SoftPinAction PRESERVE
}

// putOptionsEx parses a put_ex configuration ("" = defaults).
func putOptionsEx(cfg string) (store.PutOptions, error) {
	var o store.PutOptions
	var r putConfigJSON
	if err := decodeConfig(cfg, &r, func() int { return r.ReplicaNum }); err != nil {
		return o, err
	}
	if r.SoftPinTTLMs < 0 {
		return o, errInvalid(fmt.Sprintf("soft_pin_ttl_ms %d", r.SoftPinTTLMs))
	}
	o.Replicas = r.ReplicaNum
	o.SoftPin = r.SoftPin
	o.SoftPinTTL = time.Duration(r.SoftPinTTLMs) * time.Millisecond
	o.HardPin = r.HardPin
	o.PreferredSegments = r.PreferredSegments
	o.PreferLocal = r.SameNode
	o.Upsert = r.Upsert
	o.KeepSoftPin = r.KeepSoftPin && !r.SoftPin
	return o, nil
}

// putEx stores value under key with o. Memory inside a registered buffer is
// sent from where it is. A plain put of a key that exists succeeds and
// keeps the old value (Mooncake's behaviour); an upsert replaces it.
func (s *storeState) putEx(key string, value []byte, o store.PutOptions) error {
	if key == "" {
		return errInvalid("empty key")
	}
	ctx, cancel := s.ctx(len(value))
	defer cancel()
	var err error
	if len(value) > 0 && s.regs.contains(uint64(transfer.AddrOf(value)), uint64(len(value))) {
		err = s.c.PutFrom(ctx, key, value, o)
	} else {
		err = s.c.PutWith(ctx, key, value, o)
	}
	if !o.Upsert && errors.Is(err, store.ErrExists) {
		return nil
	}
	return err
}

// batchRemove removes keys and returns one error per key.
func (s *storeState) batchRemove(keys []string, force bool) []error {
	ctx, cancel := s.ctx(0)
	defer cancel()
	return s.c.BatchRemove(ctx, keys, force)
}

// replicaJSON is one replica of get_replica_desc.
type replicaJSON struct {
	Segment  string `json:"segment"`
	Endpoint string `json:"endpoint"`
	Addr     uint64 `json:"addr"`
	Size     uint64 `json:"size"`
}

// diskReplicaJSON is one disk-tier copy of get_replica_desc (Mooncake's
// LOCAL_DISK replica).
type diskReplicaJSON struct {
	Segment string `json:"segment"`
	URL     string `json:"url"`
	Seq     uint64 `json:"seq"`
}

// statJSON is what get_replica_desc returns for one key.
type statJSON struct {
	Size     uint64            `json:"size"`
	HardPin  bool              `json:"hard_pin"`
	Replicas []replicaJSON     `json:"replicas"`
	Disk     []diskReplicaJSON `json:"disk"`
}

// stat returns key's size and replicas as JSON.
func (s *storeState) stat(key string) ([]byte, error) {
	ctx, cancel := s.ctx(0)
	defer cancel()
	info, err := s.c.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	out := statJSON{Size: info.Size, HardPin: info.HardPin, Replicas: []replicaJSON{}, Disk: []diskReplicaJSON{}}
	for _, r := range info.Replicas {
		out.Replicas = append(out.Replicas, replicaJSON{Segment: r.Segment, Endpoint: r.Endpoint, Addr: r.Addr, Size: r.Size})
	}
	for _, d := range info.Disk {
		out.Disk = append(out.Disk, diskReplicaJSON{Segment: d.Segment, URL: d.URL, Seq: d.Seq})
	}
	return json.Marshal(out)
}

// hostname is the client's "host:port", as in Mooncake its local_hostname
// (also when that port was taken and the engine has another, openStore):
// its transfer engine's name, which is its segment's name.
func (s *storeState) hostname() string {
	if s.eng == nil {
		return s.c.SegmentName() // a dummy client: its real client's name
	}
	return cmp.Or(s.host, s.eng.Name())
}
