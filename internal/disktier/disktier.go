package disktier

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/kvcache-go/mooncake/internal/objheader"
	"github.com/kvcache-go/mooncake/store"
)

// Config configures a disk tier.
type Config struct {
	Dir            string // directory of the object files (created)
	Capacity       uint64 // bytes kept at most (default 10 GiB)
	URL            string // base URL its reads are served at ("http://host:port"), for store.DiskTier
	OffloadOnEvict bool   // ask the master to offload memory evictions here
	PromotionOnHit bool   // ask readers to put values read from here back into memory
}

// Tier is a disk tier (Mooncake's root_fs_dir): one file per object under
// the directory, holding the object as laid out in memory (its objheader,
// then the value), so the CRC32C travels with it from the put to the disk
// and back to the reader. It keeps at most Capacity bytes, dropping the
// least recently used copies. Reads are served over HTTP (Handler) by their
// own goroutines, never on the transfer engine's memory path. It implements
// store.DiskTier. The directory is locked (flock) while the tier is open:
// two tiers, in one process or two, never share it.
type Tier struct {
	dir            string
	capacity       uint64
	url            string
	offloadOnEvict bool
	promotionOnHit bool
	lock           *os.File // the directory's lock file, held until Close

	mu      sync.Mutex
	index   map[string]*diskEntry
	used    uint64
	tick    uint64
	dropped []store.DiskObject
	reads   uint64 // served reads
}

type diskEntry struct {
	hdr   objheader.Header
	file  string
	bytes uint64
	used  uint64 // LRU tick
}

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
		promotionOnHit: cfg.PromotionOnHit, lock: lock, index: map[string]*diskEntry{}}
	names, err := filepath.Glob(filepath.Join(cfg.Dir, "*.obj"))
	if err != nil {
		lock.Close()
		return nil, err
	}
	for _, f := range names {
		b, err := os.ReadFile(f)
		h, herr := objheader.Decode(b)
		if err != nil || herr != nil || objheader.Len(h.Key)+h.Size != uint64(len(b)) ||
			crc32.Checksum(b[objheader.Len(h.Key):], castagnoli) != h.CRC || f != d.file(h.Key) {
			os.Remove(f)
			continue
		}
		d.tick++
		d.index[h.Key] = &diskEntry{hdr: h, file: f, bytes: uint64(len(b)), used: d.tick}
		d.used += uint64(len(b))
	}
	d.mu.Lock()
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
// indexes them again).
func (d *Tier) Close() error {
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

func (d *Tier) file(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(d.dir, hex.EncodeToString(sum[:16])+".obj")
}

func (d *Tier) URL() string          { return d.url }
func (d *Tier) OffloadOnEvict() bool { return d.offloadOnEvict }
func (d *Tier) PromotionOnHit() bool { return d.promotionOnHit }

// Store writes an object (header and value) to its file, replacing an
// older copy of the key, then drops least recently used copies beyond the
// capacity.
func (d *Tier) Store(object []byte) (store.DiskObject, error) {
	h, err := objheader.Decode(object)
	if err != nil || objheader.Len(h.Key)+h.Size != uint64(len(object)) {
		return store.DiskObject{}, fmt.Errorf("disktier: not an object: %v", err)
	}
	if crc32.Checksum(object[objheader.Len(h.Key):], castagnoli) != h.CRC {
		return store.DiskObject{}, fmt.Errorf("disktier: %q does not match its CRC32C", h.Key)
	}
	if uint64(len(object)) > d.capacity {
		return store.DiskObject{}, fmt.Errorf("%w: %q of %d bytes exceeds %d", ErrFull, h.Key, len(object), d.capacity)
	}
	d.mu.Lock()
	if e := d.index[h.Key]; e != nil && e.hdr.Seq > h.Seq {
		d.mu.Unlock()
		return store.DiskObject{}, fmt.Errorf("disktier holds a newer %q", h.Key)
	}
	d.mu.Unlock()
	f := d.file(h.Key)
	tmp := f + ".tmp"
	if err := os.WriteFile(tmp, object, 0o644); err != nil {
		return store.DiskObject{}, fmt.Errorf("disktier: %w", err)
	}
	if err := os.Rename(tmp, f); err != nil {
		os.Remove(tmp)
		return store.DiskObject{}, fmt.Errorf("disktier: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.index[h.Key]; e != nil {
		d.used -= e.bytes
	}
	d.tick++
	d.index[h.Key] = &diskEntry{hdr: h, file: f, bytes: uint64(len(object)), used: d.tick}
	d.used += uint64(len(object))
	d.evictLocked(h.Key)
	return diskObject(h), nil
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
		os.Remove(e.file)
		delete(d.index, e.hdr.Key)
		d.used -= e.bytes
		d.dropped = append(d.dropped, diskObject(e.hdr))
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
	os.Remove(e.file)
	delete(d.index, key)
	d.used -= e.bytes
}

// Held lists the copies on disk.
func (d *Tier) Held() []store.DiskObject {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]store.DiskObject, 0, len(d.index))
	for _, e := range d.index {
		out = append(out, diskObject(e.hdr))
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
// the reader checks the value's CRC32C).
func (d *Tier) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /disk/object", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		seq, _ := strconv.ParseUint(r.URL.Query().Get("seq"), 10, 64)
		d.mu.Lock()
		e := d.index[key]
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
		if fi, serr := f.Stat(); err != nil || herr != nil || serr != nil || h.Seq != e.hdr.Seq || uint64(fi.Size()) != hl+h.Size {
			d.Delete(key, e.hdr.Seq)
			http.Error(w, "disk copy lost or corrupt", http.StatusNotFound)
			return
		}
		// The value goes out straight from the file (sendfile); its CRC32C
		// is checked by the reader, end to end, against the master's.
		w.Header().Set("Content-Length", strconv.FormatUint(h.Size, 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.Copy(w, f)
	})
	return mux
}

var _ store.DiskTier = (*Tier)(nil)

// diskObject is the store's view of an object's header.
func diskObject(h objheader.Header) store.DiskObject {
	return store.DiskObject{Key: h.Key, Seq: h.Seq, Size: h.Size, CRC: h.CRC, HardPin: h.HardPin, SoftPin: h.SoftPin, SoftPinTTL: h.SoftPinTTL}
}
