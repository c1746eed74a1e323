package store

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// DiskTier is a storage node's disk tier (Mooncake's root_fs_dir / SSD
// offload; package internal/storenode implements it). A client with one
// (Config.Disk) mounts its segment with the tier's URL and policies, copies
// the objects the master evicts from its segment to disk before zeroing
// their headers (offload on evict), reports what the disk holds when it
// (re)mounts, and deletes the copies the master lists. Readers fetch disk
// copies over HTTP from URL (GET URL/disk/object?key=K&seq=S) and check
// their CRC32C; with PromotionOnHit they put the value back into memory.
type DiskTier interface {
	URL() string
	OffloadOnEvict() bool
	PromotionOnHit() bool
	// Store keeps a copy of an object laid out as in segment memory (its
	// objheader, then the value); it fails when the value does not match
	// the header's CRC32C or the tier is full of newer objects.
	Store(object []byte) (DiskObject, error)
	Delete(key string, seq uint64)
	// Held lists the objects on disk; Dropped those dropped for capacity
	// since the last call.
	Held() []DiskObject
	Dropped() []DiskObject
}

// DiskObject is one object on a disk tier: what its header says.
type DiskObject struct {
	Key        string
	Seq        uint64 // the put's sequence number (its version)
	Size       uint64 // value bytes
	CRC        uint32 // CRC32C of the value
	HardPin    bool
	SoftPin    bool
	SoftPinTTL time.Duration
}

// DiskReplica is a copy of an object on a node's disk tier (ObjectInfo.Disk).
type DiskReplica struct {
	Segment string // the segment whose node holds the copy
	URL     string // the node's disk read server
	Seq     uint64 // the object's version
}

func diskFromPB(ds []*pb.DiskCopy) []DiskReplica {
	var out []DiskReplica
	for _, d := range ds {
		out = append(out, DiskReplica{Segment: d.Segment, URL: d.Url, Seq: d.Seq})
	}
	return out
}

// DiskReads is the number of values this client has read from disk tiers
// (Mooncake's offload RPC read count): a read served from memory leaves it
// unchanged.
func (c *Client) DiskReads() uint64 { return c.diskReads.Load() }

func diskToHeld(seg string, ds []DiskObject) []*pb.HeldObject {
	out := make([]*pb.HeldObject, len(ds))
	for i, d := range ds {
		out[i] = &pb.HeldObject{Segment: seg, Key: d.Key, Size: d.Size, Crc32C: d.CRC, Seq: d.Seq, HardPin: d.HardPin,
			SoftPin: d.SoftPin, SoftPinTtlMs: d.SoftPinTTL.Milliseconds(), Disk: true}
	}
	return out
}

// offload copies the object an offload tombstone holds in our segment to
// the disk tier; the caller zeroes the header afterwards.
func (c *Client) offload(r *pb.HeaderRef) []*pb.HeldObject {
	mem := c.segment[r.Offset:]
	h, err := objheader.Decode(mem)
	if err != nil || h.Seq != r.Seq || objheader.Len(h.Key)+h.Size > uint64(len(mem)) {
		return nil
	}
	d, err := c.cfg.Disk.Store(mem[:objheader.Len(h.Key)+h.Size])
	if err != nil {
		c.log.Warn("store: offload to disk", "key", h.Key, "err", err)
		return nil
	}
	return diskToHeld(c.segmentSpec.Name, []DiskObject{d})
}

// diskPings returns what the next ping reports about the disk tier.
func (c *Client) diskPings() (onDisk, dropped []*pb.HeldObject) {
	if c.cfg.Disk == nil || c.segmentSpec == nil {
		return nil, nil
	}
	c.mu.Lock()
	onDisk, c.onDisk = c.onDisk, nil
	c.mu.Unlock()
	return onDisk, diskToHeld(c.segmentSpec.Name, c.cfg.Disk.Dropped())
}

// readDisk fetches a disk copy over HTTP into buf and checks its CRC32C.
func (c *Client) readDisk(ctx context.Context, key string, d *pb.DiskCopy, crc uint32, buf []byte) error {
	u := d.Url + "/disk/object?key=" + url.QueryEscape(key) + "&seq=" + strconv.FormatUint(d.Seq, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: disk copy on %s: %w", ErrTransfer, d.Segment, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		// Dropped for capacity (or deleted) since the master last heard.
		return fmt.Errorf("%w: disk copy on %s is gone", ErrNotFound, d.Segment)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: disk copy on %s: HTTP %d", ErrTransfer, d.Segment, resp.StatusCode)
	}
	if resp.ContentLength != int64(len(buf)) {
		return fmt.Errorf("%w: disk copy on %s: %d bytes, want %d", ErrTransfer, d.Segment, resp.ContentLength, len(buf))
	}
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		return fmt.Errorf("%w: disk copy on %s: %w", ErrTransfer, d.Segment, err)
	}
	if Checksum(buf) != crc {
		return fmt.Errorf("%w on the disk copy on %s", ErrCorrupt, d.Segment)
	}
	c.diskReads.Add(1)
	return nil
}

// promote puts a value read from disk back into memory (promotion on hit),
// in the background; a concurrent put of the key wins.
func (c *Client) promote(key string, seq uint64, value []byte) {
	v := append([]byte(nil), value...)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.stopCtx, 10*time.Second)
		defer cancel()
		if _, err := c.put(ctx, key, v, PutOptions{promoteSeq: seq}, false); err != nil {
			c.log.Debug("store: promote from disk", "key", key, "err", err)
		}
	}()
}
