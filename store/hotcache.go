package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/internal/hotcache"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// HotCacheConfig configures the client's hot cache (Mooncake's local hot
// cache): values of frequently read keys kept in this process's memory.
// A get of a held key still asks the master, but names the version it
// holds; when that is the key's current version the master answers without
// replicas or a lease and the value is copied from local memory, so no
// stale value is ever served (hotcache.go, docs/store.md). Off by default.
type HotCacheConfig struct {
	// Size is the memory for cached values in bytes; 0 turns the cache
	// off (Mooncake's MC_STORE_LOCAL_HOT_CACHE_SIZE).
	Size uint64
	// BlockSize is the largest value cached (0 = 16 MiB; Mooncake's
	// MC_STORE_LOCAL_HOT_BLOCK_SIZE).
	BlockSize uint64
	// AdmissionThreshold is how many reads (estimated by a count-min
	// sketch) a key needs before its value is cached (0 = 2, 1..255;
	// Mooncake's MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD).
	AdmissionThreshold int
}

func (h HotCacheConfig) core() hotcache.Config {
	return hotcache.Config{Capacity: h.Size, MaxEntry: h.BlockSize, Threshold: h.AdmissionThreshold}
}

// Validate reports the first invalid field (a zero Size is valid: off).
func (h HotCacheConfig) Validate() error {
	if h.Size == 0 {
		return nil
	}
	if err := h.core().Validate(); err != nil {
		return fmt.Errorf("store: %w: %w", ErrInvalid, err)
	}
	return nil
}

// HotCacheStats are the hot cache's counters, kept as gets run.
type HotCacheStats struct {
	Entries     int    // values held
	Bytes       uint64 // bytes of the values held
	Capacity    uint64 // HotCacheConfig.Size
	Admitted    uint64 // values taken in
	Rejected    uint64 // values offered and refused (too rare, too large, or no more frequent than what they would evict)
	Evicted     uint64 // values dropped to make room
	Invalidated uint64 // values dropped by overwrites, removes and stale versions
	Hits        uint64 // gets served from the cache (the master confirmed the version held)
	Misses      uint64 // gets of keys the cache did not hold
	Stale       uint64 // gets of keys held at an older version (read remotely; the entry dropped)
	// Latency of gets served from the cache, and of the other gets of a
	// client with the cache on.
	HitLatency, MissLatency Histogram
}

// Histogram is a latency histogram in seconds: Counts[i] gets took at
// most Bounds[i] (and more than Bounds[i-1]); the last count is above
// every bound.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Sum    float64
	Count  uint64
}

// latencyBounds are the buckets of the hot cache's latency histograms, in
// seconds (10 us to 1 s).
var latencyBounds = [...]float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1}

// latency is a histogram kept with atomic counters.
type latency struct {
	counts [len(latencyBounds) + 1]atomic.Uint64
	sumNs  atomic.Uint64
}

func (l *latency) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(latencyBounds) && s > latencyBounds[i] {
		i++
	}
	l.counts[i].Add(1)
	l.sumNs.Add(uint64(max(d, 0)))
}

func (l *latency) snapshot() Histogram {
	h := Histogram{Bounds: latencyBounds[:], Counts: make([]uint64, len(latencyBounds)+1)}
	for i := range h.Counts {
		h.Counts[i] = l.counts[i].Load()
		h.Count += h.Counts[i]
	}
	h.Sum = float64(l.sumNs.Load()) / 1e9
	return h
}

// hotCache is the client's side of the hot cache: the core and the
// counters of gets.
type hotCache struct {
	core                *hotcache.Cache
	hits, misses, stale atomic.Uint64
	hitLat, missLat     latency
}

func newHotCache(cfg HotCacheConfig) (*hotCache, error) {
	if cfg.Size == 0 {
		return nil, nil
	}
	core, err := hotcache.New(cfg.core())
	if err != nil {
		return nil, fmt.Errorf("store: %w: %w", ErrInvalid, err)
	}
	return &hotCache{core: core}, nil
}

// HotCacheStats returns the hot cache's counters; ok is false when the
// cache is off.
func (c *Client) HotCacheStats() (st HotCacheStats, ok bool) {
	h := c.hot
	if h == nil {
		return HotCacheStats{}, false
	}
	cs := h.core.Stats()
	return HotCacheStats{Entries: cs.Entries, Bytes: cs.Bytes, Capacity: cs.Capacity, Admitted: cs.Admitted, Rejected: cs.Rejected,
		Evicted: cs.Evicted, Invalidated: cs.Invalidated, Hits: h.hits.Load(), Misses: h.misses.Load(), Stale: h.stale.Load(),
		HitLatency: h.hitLat.snapshot(), MissLatency: h.missLat.snapshot()}, true
}

// hotGet is a get of a client with the hot cache on: it looks key up,
// asks the master for key's replica list naming the version held, and
// serves the value from the cache when the master answers that version is
// current (hit, with the value; it must not be written). Otherwise it
// returns the replica list (with its lease) for a remote read, after
// dropping a stale entry.
func (c *Client) hotGet(ctx context.Context, key string) (info *pb.ObjectInfo, leaseEnd time.Time, hit []byte, err error) {
	h := c.hot
	held, has := h.core.Lookup(key)
	req := &pb.KeyRequest{Key: key}
	if has {
		req.CachedView, req.CachedSeq = held.View, held.Seq
	}
	info, leaseEnd, err = c.replicaListFor(ctx, req)
	switch {
	case err != nil:
		if has && errors.Is(err, ErrNotFound) {
			h.core.RemoveVersion(key, held.Version)
		}
		return nil, time.Time{}, nil, err
	case info.Unchanged && has && info.View == held.View && info.Seq == held.Seq && info.Crc32C == held.CRC && info.Size == uint64(len(held.Value)):
		h.hits.Add(1)
		return info, leaseEnd, held.Value, nil
	case info.Unchanged: // not what was asked (cannot happen with a correct master): read as usual
		h.core.RemoveVersion(key, held.Version)
		info, leaseEnd, err = c.replicaListFor(ctx, &pb.KeyRequest{Key: key})
		if err != nil {
			return nil, time.Time{}, nil, err
		}
	}
	if has {
		h.stale.Add(1)
		h.core.RemoveVersion(key, held.Version)
	} else {
		h.misses.Add(1)
	}
	return info, leaseEnd, nil, nil
}

// hotFill offers a value just read remotely (CRC32C checked, within its
// lease) to the hot cache, at the version the master named. Values held in
// this process's own segment are not cached (Mooncake's rule: they are
// local already), nor are those of a master that names no version.
func (c *Client) hotFill(key string, info *pb.ObjectInfo, value []byte) {
	h := c.hot
	if info.Seq == 0 || info.View == 0 || !h.core.Wants(key, len(value)) {
		return
	}
	me := c.mover.Name()
	for _, r := range info.Replicas {
		if r.Endpoint == me {
			return
		}
	}
	h.core.Offer(key, hotcache.Entry{Version: hotcache.Version{View: info.View, Seq: info.Seq, CRC: info.Crc32C}, Value: bytes.Clone(value)})
}

// hotForget drops keys this client overwrote or removed from the hot
// cache: memory freed early (a stale entry would never be served anyway).
func (c *Client) hotForget(keys ...string) {
	if c.hot == nil {
		return
	}
	for _, k := range keys {
		c.hot.core.Remove(k)
	}
}

// hotForgetMatching drops the entries whose key matches the RE2 pattern
// (RemoveByRegex), or all of them for an empty pattern (RemoveAll).
func (c *Client) hotForgetMatching(pattern string) {
	if c.hot == nil {
		return
	}
	if pattern == "" {
		c.hot.core.Clear()
		return
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		c.hot.core.Clear()
		return
	}
	c.hot.core.RemoveIf(re.MatchString)
}

// replicaListFor is replicaList with the request given (cached version).
func (c *Client) replicaListFor(ctx context.Context, req *pb.KeyRequest) (*pb.ObjectInfo, time.Time, error) {
	asked := c.clock.Now() // the lease starts no earlier than this on the master's side
	info, err := c.rpc.GetReplicaList(ctx, req)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: get %q: master rpc: %w", req.Key, err)
	}
	if err := statusErr(info.Status); err != nil {
		return nil, time.Time{}, fmt.Errorf("store: get %q: %w", req.Key, err)
	}
	return info, asked.Add(time.Duration(info.LeaseTtlMs) * time.Millisecond), nil
}

// hotBatchLookup looks every key of a batch get up in the hot cache: the
// entries held (a zero Entry for a key not held), or nil with the cache
// off.
func (c *Client) hotBatchLookup(keys []string) []hotcache.Entry {
	if c.hot == nil {
		return nil
	}
	held := make([]hotcache.Entry, len(keys))
	for i, k := range keys {
		held[i], _ = c.hot.core.Lookup(k)
	}
	return held
}

// hotBatchRequest is the BatchGetReplicaList request of keys naming the
// versions held (one view a request: entries of another view are not
// named, and read again).
func hotBatchRequest(keys []string, held []hotcache.Entry) *pb.BatchKeysRequest {
	req := &pb.BatchKeysRequest{Keys: keys}
	for i, e := range held {
		if e.Seq == 0 {
			continue
		}
		if req.CachedView == 0 {
			req.CachedView = e.View
			req.CachedSeqs = make([]uint64, len(keys))
		}
		if e.View == req.CachedView {
			req.CachedSeqs[i] = e.Seq
		}
	}
	return req
}

// hotBatchServe copies the values the master confirmed current from the
// hot cache into their buffers (ns, done) and takes those keys out of
// infos, so the batch reads only the others; it counts hits, misses and
// stale entries, and drops the stale ones. A confirmation that does not
// match the entry held (a master that answers wrongly) reads the key as a
// single get.
func (c *Client) hotBatchServe(ctx context.Context, keys []string, infos []*pb.ObjectInfo, held []hotcache.Entry, bs [][]byte, ns []int, errs []error, done func(int, []byte)) {
	h := c.hot
	for i, in := range infos {
		e := held[i]
		switch {
		case in == nil: // not found, or failed
			if e.Seq != 0 {
				h.core.RemoveVersion(keys[i], e.Version)
			}
		case in.Unchanged && e.Seq != 0 && in.View == e.View && in.Seq == e.Seq && in.Crc32C == e.CRC && in.Size == uint64(len(e.Value)):
			h.hits.Add(1)
			if len(bs[i]) < len(e.Value) {
				errs[i] = fmt.Errorf("store: get %q: value of %d bytes, buffer of %d: %w", keys[i], len(e.Value), len(bs[i]), ErrBufferTooSmall)
			} else {
				ns[i] = copy(bs[i], e.Value)
				if done != nil {
					done(i, bs[i][:ns[i]])
				}
			}
			infos[i] = nil
		case in.Unchanged:
			h.core.RemoveVersion(keys[i], e.Version)
			ns[i], errs[i] = c.GetInto(ctx, keys[i], bs[i])
			if errs[i] == nil && done != nil {
				done(i, bs[i][:ns[i]])
			}
			infos[i] = nil
		case e.Seq != 0:
			h.stale.Add(1)
			h.core.RemoveVersion(keys[i], e.Version)
		default:
			h.misses.Add(1)
		}
	}
}

// The environment variables of Mooncake's local hot cache, read by
// HotCacheFromEnv.
const (
	EnvHotCacheSize          = "MC_STORE_LOCAL_HOT_CACHE_SIZE"
	EnvHotBlockSize          = "MC_STORE_LOCAL_HOT_BLOCK_SIZE"
	EnvHotAdmissionThreshold = "MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD"
)

// HotCacheFromEnv is the HotCacheConfig Mooncake's environment variables
// name (EnvHotCacheSize, in bytes, EnvHotBlockSize and
// EnvHotAdmissionThreshold), looked up with getenv (os.Getenv; "" = unset).
// A value that is not a number in range is an error wrapping ErrInvalid.
func HotCacheFromEnv(getenv func(string) string) (HotCacheConfig, error) {
	var h HotCacheConfig
	num := func(name string, max uint64) (uint64, error) {
		s := strings.TrimSpace(getenv(name))
		if s == "" {
			return 0, nil
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v > max {
			return 0, fmt.Errorf("store: %w: %s=%q: want a whole number up to %d", ErrInvalid, name, s, max)
		}
		return v, nil
	}
	var err error
	if h.Size, err = num(EnvHotCacheSize, math.MaxInt64); err != nil {
		return h, err
	}
	if h.BlockSize, err = num(EnvHotBlockSize, math.MaxInt64); err != nil {
		return h, err
	}
	t, err := num(EnvHotAdmissionThreshold, 255)
	h.AdmissionThreshold = int(t)
	return h, err
}
