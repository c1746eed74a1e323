package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/transfer"
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

// DiskSource is a DiskTier whose copies readers fetch through the
// transfer engine, on the lanes that carry memory replicas: the client
// registers Region with its Mover as a transfer.Source, reports each
// copy's DiskObject.Addr to the master, and readers READ [Addr, Addr+Size)
// of the node's segment; the lane serving them calls ReadAt.
type DiskSource interface {
	Region() (addr, length uint64)
	ReadAt(addr, n uint64) (b []byte, release func(), err error)
}

// DiskBatchStore is a DiskTier that writes several objects at once: the
// client offloads the objects of one ping answer with one call.
type DiskBatchStore interface {
	StoreBatch(objects [][]byte) ([]DiskObject, []error)
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
	Addr       uint64 // where readers READ the value through the engine (DiskSource); 0 = over HTTP only
}

// DiskReplica is a copy of an object on a node's disk tier (ObjectInfo.Disk).
type DiskReplica struct {
	Segment  string // the segment whose node holds the copy
	URL      string // the node's disk read server
	Seq      uint64 // the object's version
	Endpoint string // the node's transfer engine, when it serves the copy through it
	Addr     uint64 // the value's address there (0 = HTTP only)
}

func diskFromPB(ds []*pb.DiskCopy) []DiskReplica {
	var out []DiskReplica
	for _, d := range ds {
		out = append(out, DiskReplica{Segment: d.Segment, URL: d.Url, Seq: d.Seq, Endpoint: d.Endpoint, Addr: d.Addr})
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
			SoftPin: d.SoftPin, SoftPinTtlMs: d.SoftPinTTL.Milliseconds(), Disk: true, Offset: d.Addr}
	}
	return out
}

// offloadAll copies the objects that offload tombstones among refs hold
// in our segment to the disk tier (one StoreBatch when the tier has it);
// the caller zeroes the headers afterwards.
func (c *Client) offloadAll(refs []*pb.HeaderRef) []*pb.HeldObject {
	if c.cfg.Disk == nil || c.segmentSpec == nil {
		return nil
	}
	var objects [][]byte
	for _, r := range refs {
		if !r.Offload || r.Segment != c.segmentSpec.Name || r.Offset+objheader.Align > uint64(len(c.segment)) {
			continue
		}
		mem := c.segment[r.Offset:]
		h, err := objheader.Decode(mem)
		if err != nil || h.Seq != r.Seq || objheader.Len(h.Key)+h.Size > uint64(len(mem)) {
			continue
		}
		objects = append(objects, mem[:objheader.Len(h.Key)+h.Size])
	}
	if len(objects) == 0 {
		return nil
	}
	var ds []DiskObject
	var errs []error
	if b, ok := c.cfg.Disk.(DiskBatchStore); ok {
		ds, errs = b.StoreBatch(objects)
	} else {
		ds, errs = make([]DiskObject, len(objects)), make([]error, len(objects))
		for i, o := range objects {
			ds[i], errs[i] = c.cfg.Disk.Store(o)
		}
	}
	var kept []DiskObject
	for i, err := range errs {
		if err != nil {
			c.log.Warn("store: offload to disk", "err", err)
			continue
		}
		kept = append(kept, ds[i])
	}
	return c.diskHeld(kept)
}

// sourceMover is a Mover that serves a range from a transfer.Source
// (*transfer.Engine).
type sourceMover interface {
	RegisterSource(addr, length uint64, location string, src transfer.Source) error
}

// registerDiskSource registers the disk tier's range with the engine when
// both can (DiskSource, sourceMover), so that readers fetch disk copies
// through the engine; without, they fetch them over HTTP.
func (c *Client) registerDiskSource() {
	src, ok := c.cfg.Disk.(DiskSource)
	m, mok := c.mover.(sourceMover)
	if !ok || !mok {
		return
	}
	addr, n := src.Region()
	if err := m.RegisterSource(addr, n, "disk", src); err != nil {
		c.log.Warn("store: disk tier reads over HTTP only", "err", err)
		return
	}
	c.diskSource = addr
}

// releaseDiskSource undoes registerDiskSource.
func (c *Client) releaseDiskSource() {
	if c.diskSource != 0 {
		_ = c.mover.Unregister(uintptr(c.diskSource))
	}
}

// diskHeld is what the master is told of copies on our disk tier: with
// their addresses when the engine serves them.
func (c *Client) diskHeld(ds []DiskObject) []*pb.HeldObject {
	if c.diskSource == 0 {
		for i := range ds {
			ds[i].Addr = 0
		}
	}
	return diskToHeld(c.segmentSpec.Name, ds)
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

// readDisk fetches a disk copy into buf (registered memory) and checks
// its CRC32C: through the node's transfer engine when the copy has an
// address there, over HTTP otherwise or when that read fails short of a
// checksum mismatch (the node's engine unreachable, the copy moved).
func (c *Client) readDisk(ctx context.Context, key string, d *pb.DiskCopy, crc uint32, buf []byte) error {
	if d.Addr != 0 && d.Endpoint != "" {
		err := c.readDiskEngine(ctx, d, crc, buf)
		if err == nil || errors.Is(err, ErrCorrupt) {
			return err
		}
	}
	return c.readDiskHTTP(ctx, key, d, crc, buf)
}

// readDiskEngine READs a disk copy from its node's engine, as a memory
// replica is read, and checks its CRC32C: a large value in pipelineParts
// READs in flight together, each part checksummed as it arrives while the
// later ones still move (readParts).
func (c *Client) readDiskEngine(ctx context.Context, d *pb.DiskCopy, crc uint32, buf []byte) error {
	seg, err := c.mover.OpenSegment(ctx, d.Endpoint)
	if err != nil {
		return fmt.Errorf("%w: open segment %s: %w", ErrTransfer, d.Endpoint, err)
	}
	g := grantString(d.Grant) // a lane sends it once for all the parts
	got, err := readParts(buf, func(lo, hi int) error {
		req := transfer.Request{Op: transfer.OpRead, Local: transfer.AddrOf(buf[lo:hi]), Segment: seg, Remote: d.Addr + uint64(lo), Length: hi - lo, Grant: g}
		return c.mover.Transfer(ctx, []transfer.Request{req})
	})
	if err != nil {
		return fmt.Errorf("%w: disk copy on %s: %w", ErrTransfer, d.Segment, err)
	}
	if got != crc {
		return fmt.Errorf("%w on the disk copy on %s", ErrCorrupt, d.Segment)
	}
	c.diskReads.Add(1)
	return nil
}

// readDiskHTTP fetches a disk copy over HTTP into buf and checks its CRC32C.
func (c *Client) readDiskHTTP(ctx context.Context, key string, d *pb.DiskCopy, crc uint32, buf []byte) error {
	u := d.Url + "/disk/object?key=" + url.QueryEscape(key) + "&seq=" + strconv.FormatUint(d.Seq, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if len(d.Grant) > 0 { // a node with grants checks it (disktier.GrantHeader)
		req.Header.Set("Mooncake-Grant", base64.StdEncoding.EncodeToString(d.Grant))
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
