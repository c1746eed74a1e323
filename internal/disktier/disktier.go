package disktier

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/btree"

	"github.com/kvcache-go/mooncake/internal/objheader"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// Config configures a disk tier.
type Config struct {
	Dir            string // directory of the object files (created)
	Capacity       uint64 // bytes kept at most (default 10 GiB)
	URL            string // base URL its reads are served at ("http://host:port"), for store.DiskTier
	OffloadOnEvict bool   // ask the master to offload memory evictions here
	PromotionOnHit bool   // ask readers to put values read from here back into memory
	Buffered       bool   // no direct I/O (O_DIRECT): reads and writes go through the page cache
	// Authorize, when set, guards the HTTP reads (Handler): a read needs a
	// GrantHeader that Authorize accepts for the value's address range
	// (addr, n) in the tier's Region, as a transfer engine read does (a
	// node with data-path grants: grant.Verifier.Check). nil: open.
	Authorize func(grant []byte, addr, n uint64) bool
}

// GrantHeader carries an HTTP read's grant (standard base64).
const GrantHeader = "Mooncake-Grant"

// Tier is a disk tier (Mooncake's root_fs_dir): one file per object under
// the directory, holding the object as laid out in memory (its objheader,
// then the value), so the CRC32C travels with it from the put to the disk
// and back to the reader. It keeps at most Capacity bytes, dropping the
// least recently used copies. Readers read its values through a transfer
// engine (ReadAt and Prefetch: it is a transfer.Prefetcher registered as a
// Source) or over HTTP (Handler). It implements store.DiskTier. The directory is locked (flock) while the tier is open:
// two tiers, in one process or two, never share it.
type Tier struct {
	dir            string
	capacity       uint64
	url            string
	offloadOnEvict bool
	promotionOnHit bool
	authorize      func(grant []byte, addr, n uint64) bool // Config.Authorize
	lock           *os.File                                // the directory's lock file, held until Close

	direct atomic.Bool // direct I/O (io.go); off where the file system refuses it
	bufs   bufPool
	fds    fdCache // read descriptors (fdcache.go)

	mu      sync.Mutex
	index   map[string]*diskEntry
	byAddr  *btree.BTreeG[*diskEntry] // the entries by address (ReadAt)
	next    uint64                    // the next entry's address
	used    uint64
	tick    uint64
	dropped []store.DiskObject
	reads   uint64 // served reads

	writeBytes, readBytes atomic.Uint64
	writeNanos, readNanos atomic.Int64
	writeWall             atomic.Int64 // wall time of Store and StoreBatch calls
	readCalls, aheadHits  atomic.Uint64
	aheadReads, aheadSpec atomic.Uint64
	aheadDropped          atomic.Uint64
	laneWaits             atomic.Uint64 // ReadAt calls that waited for their read ahead
	laneWaitNanos         atomic.Int64
	aheadNanos            atomic.Int64 // the reads ahead's time, summed
	tmpSeq                atomic.Uint64

	raSlice   uint64 // the engine's slice size, as last seen (under mu)
	raMu      sync.Mutex
	ra        map[raKey]*raChunk // slices read ahead (readahead.go)
	raBytes   uint64
	raSwept   time.Time
	raQueue   []*raRead // reads ahead not started yet: announced first (raFront of them), then speculative
	raFront   int
	raTail    map[uint64]*raRead // the queued reads by the address after their last slice
	raReaders int                // goroutines running them (at most ReadDepth)
	raWG      sync.WaitGroup     // the readers (Close waits)
}

type diskEntry struct {
	hdr   objheader.Header
	file  string
	bytes uint64 // file bytes
	used  uint64 // LRU tick
	addr  uint64 // where peers read its value (Region)
	// readAt is when its first slice was last announced or read
	// (speculative read-ahead's stream test, readahead.go).
	readAt time.Time
}

// The tier's address range (Region): values are laid out in it one after
// the other, each at a block boundary with a block of gap, from a random
// start chosen at Open, so an address a reader learned before the tier
// was reopened names nothing now (or fails its checksum), and never
// memory: processes map nothing above 2^62.
const (
	regionBase = 1 << 62
	regionLen  = 1 << 61
)

func (e *diskEntry) end() uint64 { return e.addr + e.hdr.Size }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrFull is returned by Store for an object larger than the capacity.
var ErrFull = errors.New("disktier: full")

// ErrLocked is returned by Open when another open tier holds the directory.
var ErrLocked = errors.New("disktier: directory in use by another disk tier")

// Open opens (creating) the directory, locks it and indexes the valid
// objects in it; files that fail their checksums are removed.
func Open(cfg Config) (*Tier, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("disktier: no directory")
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 10 << 30
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("disktier: %w", err)
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	d := &Tier{dir: cfg.Dir, capacity: cfg.Capacity, url: cfg.URL, offloadOnEvict: cfg.OffloadOnEvict,
		promotionOnHit: cfg.PromotionOnHit, authorize: cfg.Authorize, lock: lock, index: map[string]*diskEntry{},
		byAddr: btree.NewG(16, func(a, b *diskEntry) bool { return a.addr < b.addr }), ra: map[raKey]*raChunk{}, raTail: map[uint64]*raRead{},
		next: regionBase + rand.Uint64N(regionLen/2)&^(blockSize-1)}
	d.direct.Store(!cfg.Buffered)
	if tmps, err := filepath.Glob(filepath.Join(cfg.Dir, "*.tmp")); err == nil { // writes cut short by a crash
		for _, f := range tmps {
			os.Remove(f)
		}
	}
	names, err := filepath.Glob(filepath.Join(cfg.Dir, "*.obj"))
	if err != nil {
		lock.Close()
		return nil, err
	}
	d.mu.Lock()
	for _, f := range names {
		b, err := os.ReadFile(f)
		h, herr := objheader.Decode(b)
		off := dataOffset(objheader.Len(h.Key))
		if err != nil || herr != nil || off+h.Size != uint64(len(b)) ||
			crc32.Checksum(b[off:], castagnoli) != h.CRC || f != d.file(h.Key, h.Seq) {
			os.Remove(f)
			continue
		}
		if old := d.index[h.Key]; old != nil { // two versions (a crash between write and delete): keep the newer
			if old.hdr.Seq > h.Seq {
				os.Remove(f)
				continue
			}
			d.dropLocked(old)
		}
		d.addLocked(h, f, uint64(len(b)), 0)
	}
	d.evictLocked("")
	d.mu.Unlock()
	return d, nil
}

// lockDir takes an exclusive flock on DIR/.lock (released when the file is
// closed, or when the process ends).
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("disktier: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrLocked, dir, err)
	}
	return f, nil
}

// Close releases the directory (the files stay: a tier reopened on it
// indexes them again), once the reads started ahead have ended.
func (d *Tier) Close() error {
	d.raWG.Wait()
	d.fds.close()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}

// Capacity is the most bytes the tier keeps.
func (d *Tier) Capacity() uint64 { return d.capacity }

// file is the name of version seq of key: a newer version is a new file,
// so a read of the old one never sees the new one's bytes.
func (d *Tier) file(key string, seq uint64) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(d.dir, hex.EncodeToString(sum[:16])+"-"+strconv.FormatUint(seq, 16)+".obj")
}

// addLocked indexes a file and gives its value an address.
func (d *Tier) addLocked(h objheader.Header, file string, bytes, addr uint64) *diskEntry {
	d.tick++
	if addr == 0 {
		addr = d.reserveLocked(h.Size)
	}
	e := &diskEntry{hdr: h, file: file, bytes: bytes, used: d.tick, addr: addr}
	d.index[h.Key] = e
	d.byAddr.ReplaceOrInsert(e)
	d.used += bytes
	return e
}

// reserveLocked takes the address range of a value of size bytes: the
// next one, a block of gap after the last (so a read never spans two).
func (d *Tier) reserveLocked(size uint64) uint64 {
	a := d.next
	d.next += alignUp(size) + blockSize
	return a
}

// dropLocked forgets an entry and removes its file.
func (d *Tier) dropLocked(e *diskEntry) {
	d.fds.drop(e.file)
	os.Remove(e.file)
	if d.index[e.hdr.Key] == e {
		delete(d.index, e.hdr.Key)
	}
	d.byAddr.Delete(e)
	d.used -= e.bytes
}

func (d *Tier) URL() string          { return d.url }
func (d *Tier) OffloadOnEvict() bool { return d.offloadOnEvict }
func (d *Tier) PromotionOnHit() bool { return d.promotionOnHit }

// Store writes an object (header and value, as laid out in segment
// memory) to its file, replacing an older copy of the key, then drops
// least recently used copies beyond the capacity.
func (d *Tier) Store(object []byte) (store.DiskObject, error) {
	obs, errs := d.StoreBatch([][]byte{object})
	return obs[0], errs[0]
}

// StoreBatch stores objects as Store does, writing up to ioParallel files
// at once, and returns each one's result.
func (d *Tier) StoreBatch(objects [][]byte) ([]store.DiskObject, []error) {
	obs, errs := make([]store.DiskObject, len(objects)), make([]error, len(objects))
	start := time.Now()
	defer func() { d.writeWall.Add(int64(time.Since(start))) }()
	// The values get addresses in the order they were put (their sequence
	// numbers; the master evicts them in an order of its own), so values
	// put together, offloaded together, are read ahead together when they
	// are read back in the order they were written (a prompt's KV blocks).
	addrs := make([]uint64, len(objects))
	seqs := make([]uint64, len(objects))
	order := make([]int, 0, len(objects))
	for i, o := range objects {
		if h, err := objheader.Decode(o); err == nil {
			seqs[i], addrs[i] = h.Seq, h.Size
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(seqs[a], seqs[b]) })
	d.mu.Lock()
	for _, i := range order {
		addrs[i] = d.reserveLocked(addrs[i])
	}
	d.mu.Unlock()
	sem := make(chan struct{}, ioParallel)
	var wg sync.WaitGroup
	for i, o := range objects {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			obs[i], errs[i] = d.store(o, addrs[i])
		})
	}
	wg.Wait()
	return obs, errs
}

func (d *Tier) store(object []byte, addr uint64) (store.DiskObject, error) {
	h, err := objheader.Decode(object)
	if err != nil || objheader.Len(h.Key)+h.Size != uint64(len(object)) {
		return store.DiskObject{}, fmt.Errorf("disktier: not an object: %v", err)
	}
	hl := objheader.Len(h.Key)
	bytes := dataOffset(hl) + h.Size
	if bytes > d.capacity {
		return store.DiskObject{}, fmt.Errorf("%w: %q of %d bytes exceeds %d", ErrFull, h.Key, bytes, d.capacity)
	}
	d.mu.Lock()
	if e := d.index[h.Key]; e != nil && e.hdr.Seq >= h.Seq {
		d.mu.Unlock()
		if e.hdr.Seq == h.Seq {
			return d.diskObject(e), nil
		}
		return store.DiskObject{}, fmt.Errorf("disktier holds a newer %q", h.Key)
	}
	d.mu.Unlock()
	f := d.file(h.Key, h.Seq)
	start := time.Now()
	// The file is written under its own name when no file has it (a
	// crash mid-write leaves one that fails its checks at the next Open;
	// readers see it only once it is indexed below); when one has (a
	// concurrent store of the same version), through a file of its own,
	// renamed over it: two writers never share a file.
	created, err := d.writeFile(f, object[:hl], object[hl:], h.CRC, true)
	if errors.Is(err, syscall.EEXIST) {
		tmp := f + "." + strconv.FormatUint(d.tmpSeq.Add(1), 10) + ".tmp"
		if _, err = d.writeFile(tmp, object[:hl], object[hl:], h.CRC, false); err == nil {
			err = os.Rename(tmp, f)
		}
		if err != nil {
			os.Remove(tmp)
		}
	} else if err != nil && created {
		os.Remove(f)
	}
	if err != nil {
		return store.DiskObject{}, fmt.Errorf("disktier: %q: %w", h.Key, err)
	}
	d.writeNanos.Add(int64(time.Since(start)))
	d.writeBytes.Add(bytes)
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.index[h.Key]; e != nil {
		switch {
		case e.hdr.Seq > h.Seq: // a newer version was stored meanwhile
			os.Remove(f)
			return store.DiskObject{}, fmt.Errorf("disktier holds a newer %q", h.Key)
		case e.hdr.Seq == h.Seq: // stored meanwhile by a concurrent store (the same bytes, in the same file)
			return d.diskObject(e), nil
		}
		d.dropLocked(e)
	}
	e := d.addLocked(h, f, bytes, addr)
	d.evictLocked(h.Key)
	return d.diskObject(e), nil
}

// evictLocked drops least recently used copies (never keep) until the tier
// fits its capacity.
func (d *Tier) evictLocked(keep string) {
	if d.used <= d.capacity {
		return
	}
	es := make([]*diskEntry, 0, len(d.index))
	for _, e := range d.index {
		if e.hdr.Key != keep {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b *diskEntry) int { return cmp.Compare(a.used, b.used) })
	for _, e := range es {
		if d.used <= d.capacity {
			break
		}
		d.dropLocked(e)
		d.dropped = append(d.dropped, d.diskObject(e))
	}
}

// Delete removes the copy of key if it is version seq or older.
func (d *Tier) Delete(key string, seq uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.index[key]
	if e == nil || e.hdr.Seq > seq {
		return
	}
	d.dropLocked(e)
}

// Held lists the copies on disk.
func (d *Tier) Held() []store.DiskObject {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]store.DiskObject, 0, len(d.index))
	for _, e := range d.index {
		out = append(out, d.diskObject(e))
	}
	return out
}

// Dropped returns the copies dropped for capacity since the last call.
func (d *Tier) Dropped() []store.DiskObject {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.dropped
	d.dropped = nil
	return out
}

// Usage is the bytes and objects held and the reads served (metrics).
func (d *Tier) Usage() (used uint64, objects int, reads uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used, len(d.index), d.reads
}

// Handler serves GET /disk/object?key=K&seq=S: the value of that version
// (a file whose header does not match is removed and reported as missing;
// the reader checks the value's CRC32C). Readers with a transfer engine
// read through it instead (ReadAt); this serves the others. With
// Config.Authorize a read without a GrantHeader is refused (403) and one
// whose grant does not cover the value is answered as a missing one (404:
// whether another tenant's key is on disk does not show).
func (d *Tier) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /disk/object", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		seq, _ := strconv.ParseUint(r.URL.Query().Get("seq"), 10, 64)
		var g []byte
		if d.authorize != nil {
			var err error
			if g, err = base64.StdEncoding.DecodeString(r.Header.Get(GrantHeader)); err != nil || len(g) == 0 {
				http.Error(w, "a grant is needed ("+GrantHeader+")", http.StatusForbidden)
				return
			}
		}
		d.mu.Lock()
		e := d.index[key]
		if e != nil && d.authorize != nil && !d.authorize(g, e.addr, e.hdr.Size) {
			e = nil
		}
		if e != nil && (seq == 0 || e.hdr.Seq == seq) {
			d.tick++
			e.used = d.tick
			d.reads++
		}
		d.mu.Unlock()
		if e == nil || (seq != 0 && e.hdr.Seq != seq) {
			http.Error(w, "no such object on disk", http.StatusNotFound)
			return
		}
		f, err := os.Open(e.file)
		if err != nil {
			d.Delete(key, e.hdr.Seq)
			http.Error(w, "disk copy lost", http.StatusNotFound)
			return
		}
		defer f.Close()
		hl := objheader.Len(e.hdr.Key)
		hb := make([]byte, hl)
		_, err = io.ReadFull(f, hb)
		h, herr := objheader.Decode(hb)
		off := dataOffset(hl)
		if fi, serr := f.Stat(); err != nil || herr != nil || serr != nil || h.Seq != e.hdr.Seq || uint64(fi.Size()) != off+h.Size {
			d.Delete(key, e.hdr.Seq)
			http.Error(w, "disk copy lost or corrupt", http.StatusNotFound)
			return
		}
		if _, err := f.Seek(int64(off), io.SeekStart); err != nil {
			http.Error(w, "disk copy unreadable", http.StatusInternalServerError)
			return
		}
		// The value goes out straight from the file (sendfile); its CRC32C
		// is checked by the reader, end to end, against the master's.
		w.Header().Set("Content-Length", strconv.FormatUint(h.Size, 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.CopyN(w, f, int64(h.Size))
	})
	return mux
}

// Region is the address range the tier's values are read at through a
// transfer engine (store.DiskSource): register it as a transfer.Source.
func (d *Tier) Region() (addr, length uint64) { return regionBase, regionLen }

// ErrNoObject: ReadAt of a range that is not inside one value the tier
// holds (dropped, deleted, or an address from before a reopen).
var ErrNoObject = errors.New("disktier: no object at that address")

// ReadAt returns n bytes of the value whose address range holds [addr,
// addr+n), read from its file (direct I/O where the file system takes it),
// in a pooled buffer that release gives back. It implements
// transfer.Source: a transfer engine's lanes call it for peers' READs of
// Region, one call per slice. The reader checks the value's CRC32C.
func (d *Tier) ReadAt(addr, n uint64) ([]byte, func(), error) {
	var e *diskEntry
	now := time.Now()
	d.mu.Lock()
	d.byAddr.DescendLessOrEqual(&diskEntry{addr: addr}, func(x *diskEntry) bool { e = x; return false })
	if e == nil || n == 0 || addr+n < addr || addr+n > e.end() {
		d.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %#x+%d", ErrNoObject, addr, n)
	}
	if addr == e.addr {
		d.tick++
		e.used = d.tick
		d.reads++
		e.readAt = now
	}
	file, off := e.file, dataOffset(objheader.Len(e.hdr.Key))+(addr-e.addr)
	d.mu.Unlock()
	d.readCalls.Add(1)
	if c := d.takeAhead(addr, n); c != nil {
		if c.r.err == nil {
			d.aheadHits.Add(1)
			d.readBytes.Add(n)
			return c.r.b[c.off : c.off+n : c.off+n], func() { d.unref(c.r) }, nil
		}
		d.unref(c.r)
	} else {
		// Not announced (no lane hinted it): read the rest of the value
		// ahead while this slice is read here.
		d.mu.Lock()
		plan := d.aheadPlanLocked(e, addr, n)
		d.mu.Unlock()
		d.readAhead(plan, false, now)
	}
	b, buf, err := d.readRange(file, off, n)
	if err != nil {
		return nil, nil, fmt.Errorf("disktier: %w", err)
	}
	d.readNanos.Add(int64(time.Since(now)))
	d.readBytes.Add(n)
	return b, func() { d.bufs.put(buf) }, nil
}

// IOStats is what the tier's file I/O moved and the time its calls took
// (summed over parallel calls): bytes written by Store and read by ReadAt;
// WriteWall is the wall time of the Store and StoreBatch calls (the
// offload write rate is WriteBytes / WriteWall).
type IOStats struct {
	WriteBytes, ReadBytes uint64
	Write, Read           time.Duration
	WriteWall             time.Duration
	Direct                bool // direct I/O in use
	// ReadCalls counts ReadAt calls (transfer slices served), AheadHits
	// those served by a read started ahead (readahead.go), AheadReads the
	// reads ahead (one or more slices each), AheadSpeculative the slices
	// read ahead speculatively (not announced), AheadDropped the slices
	// read ahead and dropped unasked.
	ReadCalls, AheadHits, AheadReads, AheadSpeculative, AheadDropped uint64
	// LaneWaits counts the slices whose read ahead was still running when
	// their lane asked for them, LaneWait the time those lanes waited;
	// AheadBusy is the reads ahead's time summed (AheadBusy over wall time
	// is how many were in the device on average).
	LaneWaits           uint64
	LaneWait, AheadBusy time.Duration
}

// IOStats returns the tier's I/O counters.
func (d *Tier) IOStats() IOStats {
	return IOStats{WriteBytes: d.writeBytes.Load(), ReadBytes: d.readBytes.Load(),
		Write: time.Duration(d.writeNanos.Load()), Read: time.Duration(d.readNanos.Load()),
		WriteWall: time.Duration(d.writeWall.Load()), Direct: d.direct.Load(), ReadCalls: d.readCalls.Load(), AheadHits: d.aheadHits.Load(),
		AheadReads: d.aheadReads.Load(), AheadSpeculative: d.aheadSpec.Load(),
		AheadDropped: d.aheadDropped.Load(), LaneWaits: d.laneWaits.Load(), LaneWait: time.Duration(d.laneWaitNanos.Load()),
		AheadBusy: time.Duration(d.aheadNanos.Load())}
}

var _ store.DiskTier = (*Tier)(nil)

var (
	_ store.DiskSource     = (*Tier)(nil)
	_ store.DiskBatchStore = (*Tier)(nil)
	_ transfer.Prefetcher  = (*Tier)(nil)
)

// diskObject is the store's view of an entry.
func (d *Tier) diskObject(e *diskEntry) store.DiskObject {
	h := e.hdr
	return store.DiskObject{Key: h.Key, Seq: h.Seq, Size: h.Size, CRC: h.CRC, HardPin: h.HardPin, SoftPin: h.SoftPin,
		SoftPinTTL: h.SoftPinTTL, Addr: e.addr}
}
