package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/disktier"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// DiskConfig configures RunDisk.
type DiskConfig struct {
	Dir       string        // where the tier's directory and the reference files go ("" = the temp dir)
	Size      int           // value size
	Objects   int           // objects offloaded (Objects x Size on disk)
	Clients   int           // the larger client count (rows: 1 and Clients)
	Batch     int           // keys per batch get
	Rounds    int           // rounds per row (median)
	Duration  time.Duration // length of one phase
	Transport string
	Lanes     int // the clients' engines' TCP bulk lanes (0: the engine's default)
}

// DiskTierRow is one client count: gets from the disk tier, batched and one
// key at a time, next to the disk's own sequential read of the tier's
// files, measured in the same round (medians over the rounds). SeqGBps
// reads with the queue the tier keeps (disktier.ReadDepth reads at once),
// Seq1GBps one read at a time.
type DiskTierRow struct {
	Clients                     int
	BatchGBps, GetGBps, SeqGBps float64
	Seq1GBps                    float64
	// MemGBps is batch gets of values held in the node's memory, on the
	// same transport: the engine's own read rate, in the same rounds.
	MemGBps float64
	// MemGetGBps is single gets of those values (one key per call).
	MemGetGBps float64
	// Batch and Get are what the tier saw during the batch and single
	// gets from disk (all rounds).
	Batch, Get TierPhase
}

// TierPhase is the disk tier's side of a phase of gets: the share of the
// slices its lanes asked for whose read ahead was still running (the lane
// waited for the disk), the mean wait of those, and the mean number of
// reads ahead in the device (their summed time over the wall time).
type TierPhase struct {
	Waited   float64
	Wait     time.Duration
	InDevice float64
}

// phaseStats sums the tier's counters over a row's phases.
type phaseStats struct {
	calls, waits    uint64
	wait, busy, all time.Duration
}

func (p *phaseStats) tier() TierPhase {
	var t TierPhase
	if p.calls > 0 {
		t.Waited = float64(p.waits) / float64(p.calls)
	}
	if p.waits > 0 {
		t.Wait = p.wait / time.Duration(p.waits)
	}
	if p.all > 0 {
		t.InDevice = p.busy.Seconds() / p.all.Seconds()
	}
	return t
}

// tierPhase runs f, adding what the tier saw meanwhile to p.
func tierPhase(tier *disktier.Tier, p *phaseStats, f func() float64) float64 {
	a, start := tier.IOStats(), time.Now()
	gbps := f()
	b := tier.IOStats()
	p.all += time.Since(start)
	p.calls += b.ReadCalls - a.ReadCalls
	p.waits += b.LaneWaits - a.LaneWaits
	p.wait += b.LaneWait - a.LaneWait
	p.busy += b.AheadBusy - a.AheadBusy
	return gbps
}

// DiskResult is what RunDisk measured.
type DiskResult struct {
	Objects, Size int
	Direct        bool // the tier used direct I/O (and so did the references)
	// OffloadGBps is the node's offload write rate (bytes written / wall
	// time of its batch writes); SeqWriteGBps the disk's sequential write of
	// as many files of the same size, with the tier's queue depth
	// (disktier.WriteDepth files at once), SeqWrite1GBps one at a time.
	OffloadGBps, SeqWriteGBps, SeqWrite1GBps float64
	Rows                                     []DiskTierRow
	// ReadCalls is the slices the tier served to the engine's lanes,
	// AheadHits those it had read ahead, AheadReads its reads ahead,
	// Speculative the slices it read ahead unannounced, Dropped those read
	// ahead and never asked for.
	ReadCalls, AheadHits, AheadReads, Speculative, Dropped uint64
}

// RunDisk measures the disk tier against its disk: a node offloads
// Objects values to its tier (the offload write rate, next to a sequential
// write of as many files), then clients get them back from disk (batch
// gets of Batch keys and single gets) while the same files are read
// sequentially, whole files, with the tier's queue depth (and one at a
// time), in the same rounds; batch gets
// of values held in the node's memory, in the same rounds, give the
// transfer path's own rate. Both sides
// use direct I/O (O_DIRECT) when the file system takes it, so neither is
// served from the page cache; where it does not, the files are dropped
// from the page cache (fadvise) before every phase.
func RunDisk(ctx context.Context, c DiskConfig) (*DiskResult, error) {
	dir, err := os.MkdirTemp(c.Dir, "mooncake-bench-disk-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := masterserver.Start(masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond,
		Core: master.Config{Durable: true, HighWatermark: 1, EvictionRatio: 0.5}})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	const segSize = 64 << 20
	n, err := storenode.Start(ctx, storenode.Config{Master: srv.Addr(), SegmentSize: segSize, PingInterval: 20 * time.Millisecond,
		Engine: transfer.Config{Transport: c.Transport}, UnmountGrace: 100 * time.Millisecond,
		RootFSDir: filepath.Join(dir, "tier"), EnableOffload: true, OffloadOnEvict: true, DiskCapacity: uint64(c.Objects+8) * uint64(c.Size+8192)})
	if err != nil {
		return nil, err
	}
	defer n.Close()
	var cls []*store.Client
	for range c.Clients {
		eng, err := transfer.Open(ctx, transfer.Config{Transport: c.Transport, Lanes: c.Lanes})
		if err != nil {
			return nil, err
		}
		defer eng.Close()
		cl, err := store.New(ctx, store.Config{Master: srv.Addr(), Mover: eng, LocalBufferSize: uint64(c.Batch*c.Size) + 4<<20, UnmountGrace: 100 * time.Millisecond})
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		cls = append(cls, cl)
	}
	// The disk's sequential write of as many files, part by part between
	// the offloads (the same moments, as near as can be).
	var seqBytes, seqFiles int
	var seqTook, seq1Took time.Duration
	refDir := filepath.Join(dir, "ref")
	keys, err := offloadKeys(ctx, srv, cls[0], c, segSize/4, func(count int) error {
		direct := n.DiskTier().IOStats().Direct
		b, took, err := seqWrite(refDir, seqFiles, count, c.Size, direct, disktier.WriteDepth)
		if err != nil {
			return err
		}
		_, took1, err := seqWrite(refDir, c.Objects+seqFiles, count, c.Size, direct, 1)
		seqBytes, seqFiles, seqTook, seq1Took = seqBytes+b, seqFiles+count, seqTook+took, seq1Took+took1
		return err
	})
	if err != nil {
		return nil, err
	}
	// Values kept in the node's memory (no eviction from here on): the
	// memory path's reference.
	memKeys := make([]string, c.Batch)
	v := make([]byte, c.Size)
	for i := range memKeys {
		memKeys[i] = fmt.Sprint("mem/", i)
		if err := cls[0].Put(ctx, memKeys[i], v); err != nil {
			return nil, fmt.Errorf("memory reference: %w", err)
		}
	}
	tier := n.DiskTier()
	io := tier.IOStats()
	res := &DiskResult{Objects: len(keys), Size: c.Size, Direct: io.Direct,
		OffloadGBps: float64(io.WriteBytes) / io.WriteWall.Seconds() / 1e9}
	res.SeqWriteGBps = float64(seqBytes) / seqTook.Seconds() / 1e9
	res.SeqWrite1GBps = float64(seqBytes) / seq1Took.Seconds() / 1e9
	files, _ := filepath.Glob(filepath.Join(dir, "tier", "*.obj"))
	uncache := func() {
		if !io.Direct {
			for _, f := range files {
				dropCache(f)
			}
		}
	}
	for _, nc := range []int{1, c.Clients} {
		var batch, get, seq, seq1, mem, mem1 []float64
		var batchSt, getSt phaseStats
		for range c.Rounds {
			uncache()
			batch = append(batch, tierPhase(tier, &batchSt, func() float64 { return diskGets(ctx, cls[:nc], keys, c.Size, c.Batch, c.Duration) }))
			uncache()
			get = append(get, tierPhase(tier, &getSt, func() float64 { return diskGets(ctx, cls[:nc], keys, c.Size, 1, c.Duration) }))
			uncache()
			seq = append(seq, seqRead(files, io.Direct, disktier.ReadDepth, c.Duration))
			uncache()
			seq1 = append(seq1, seqRead(files, io.Direct, 1, c.Duration))
			mem = append(mem, diskGets(ctx, cls[:nc], memKeys, c.Size, c.Batch, c.Duration))
			mem1 = append(mem1, diskGets(ctx, cls[:nc], memKeys, c.Size, 1, c.Duration))
		}
		slices.Sort(batch)
		slices.Sort(get)
		slices.Sort(seq)
		slices.Sort(seq1)
		slices.Sort(mem)
		slices.Sort(mem1)
		res.Rows = append(res.Rows, DiskTierRow{Clients: nc, BatchGBps: batch[len(batch)/2], GetGBps: get[len(get)/2], SeqGBps: seq[len(seq)/2],
			Seq1GBps: seq1[len(seq1)/2], MemGBps: mem[len(mem)/2], MemGetGBps: mem1[len(mem1)/2], Batch: batchSt.tier(), Get: getSt.tier()})
		if nc == c.Clients {
			break
		}
	}
	st := tier.IOStats()
	res.ReadCalls, res.AheadHits, res.AheadReads, res.Speculative, res.Dropped = st.ReadCalls, st.AheadHits, st.AheadReads,
		st.AheadSpeculative, st.AheadDropped
	return res, nil
}

// offloadKeys puts c.Objects values, a part of the segment at a time, and
// evicts each part to the node's disk tier, calling after with the part's
// count once it is on disk; it returns the keys held on disk only.
func offloadKeys(ctx context.Context, srv *masterserver.Server, cl *store.Client, c DiskConfig, part int, after func(n int) error) ([]string, error) {
	v := make([]byte, c.Size)
	for i := range v {
		v[i] = byte(i * 31)
	}
	core := srv.Core()
	per := max(1, part/c.Size)
	var keys []string
	for i := 0; i < c.Objects; i += per {
		var batch []string
		for j := i; j < min(c.Objects, i+per); j++ {
			k := fmt.Sprint("disk/", j)
			if err := cl.Put(ctx, k, v); err != nil {
				return nil, fmt.Errorf("disk tier fill: %w", err)
			}
			batch = append(batch, k)
		}
		deadline := time.Now().Add(30 * time.Second)
		for left := batch; len(left) > 0; {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("disk tier fill: %d objects not offloaded in 30s", len(left))
			}
			busy := false
			for _, r := range core.Tombstones() {
				busy = busy || r.Offload
			}
			if busy {
				time.Sleep(2 * time.Millisecond) // the node offloads at its next ping
				continue
			}
			var still []string
			for _, k := range left {
				if info, err := core.Query(k); err != nil || len(info.Replicas) != 0 || len(info.Disk) != 1 {
					still = append(still, k)
				}
			}
			if left = still; len(left) > 0 {
				core.Evict()
			}
		}
		keys = append(keys, batch...)
		if err := after(len(batch)); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// diskGets is the GB/s of clients getting keys from disk into registered
// buffers, batch keys per call (BatchGetInto; 1: GetInto), for d.
func diskGets(ctx context.Context, cls []*store.Client, keys []string, size, batch int, d time.Duration) float64 {
	var mu sync.Mutex
	total := 0
	start := time.Now()
	var wg sync.WaitGroup
	for ci, cl := range cls {
		wg.Go(func() {
			slab := alignedBuf(batch * size)
			if err := cl.RegisterBuffer(slab); err != nil {
				return
			}
			defer cl.UnregisterBuffer(slab)
			dsts := make([][]byte, batch)
			for j := range dsts {
				dsts[j] = slab[j*size : (j+1)*size]
			}
			ks := make([]string, batch)
			got := 0
			for i := ci * len(keys) / len(cls); time.Since(start) < d; i += batch {
				if batch == 1 {
					if n, err := cl.GetInto(ctx, keys[i%len(keys)], slab); err == nil {
						got += n
					}
					continue
				}
				for j := range ks {
					ks[j] = keys[(i+j)%len(keys)]
				}
				ns, errs := cl.BatchGetInto(ctx, ks, dsts)
				for j, err := range errs {
					if err == nil {
						got += ns[j]
					}
				}
			}
			mu.Lock()
			total += got
			mu.Unlock()
		})
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds() / 1e9
}

// seqRead is the GB/s of reading files in order, each whole with one
// pread, depth reads at once (fio's sequential read with that iodepth),
// for d; the files are opened once, before the clock starts.
func seqRead(files []string, direct bool, depth int, d time.Duration) float64 {
	flags := unix.O_RDONLY
	if direct {
		flags |= unix.O_DIRECT
	}
	fds := make([]int, 0, len(files))
	sizes := make([]int, 0, len(files))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	most := 0
	for _, f := range files {
		fd, err := unix.Open(f, flags, 0)
		if err != nil {
			return 0
		}
		fds = append(fds, fd)
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			return 0
		}
		sizes = append(sizes, int(st.Size+4095)&^4095)
		most = max(most, sizes[len(sizes)-1])
	}
	if len(fds) == 0 {
		return 0
	}
	var next, total atomic.Int64
	var failed atomic.Bool
	start := time.Now()
	var wg sync.WaitGroup
	for range depth {
		wg.Go(func() {
			buf := alignedBuf(most)
			for time.Since(start) < d && !failed.Load() {
				i := int(next.Add(1)-1) % len(fds)
				m, err := unix.Pread(fds[i], buf[:sizes[i]], 0)
				if err != nil {
					failed.Store(true)
					return
				}
				total.Add(int64(m))
				if !direct {
					dropCache(files[i])
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		return 0
	}
	return float64(total.Load()) / time.Since(start).Seconds() / 1e9
}

// seqWrite writes n new files (named from first on) of size bytes plus
// the tier's 4 KiB header block, depth at once, into dir, and returns the
// bytes written and the time taken.
func seqWrite(dir string, first, n, size int, direct bool, depth int) (int, time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	total := (size + 4096 + 4095) &^ 4095
	buf := alignedBuf(total)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	flags := unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC
	if direct {
		flags |= unix.O_DIRECT
	}
	var next atomic.Int64
	errs := make([]error, depth)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range depth {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fd, err := unix.Open(filepath.Join(dir, fmt.Sprint(first+i)), flags, 0o644)
				if err == nil {
					_, err = unix.Pwrite(fd, buf, 0)
					unix.Close(fd)
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return n * total, time.Since(start), errors.Join(errs...)
}

func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := int(uintptr(unsafe.Pointer(&b[0])) & 4095)
	if off != 0 {
		off = 4096 - off
	}
	return b[off : off+n]
}

// dropCache drops a file's pages from the page cache.
func dropCache(f string) {
	if fd, err := unix.Open(f, unix.O_RDONLY, 0); err == nil {
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
		unix.Close(fd)
	}
}
