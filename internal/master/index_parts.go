package master

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
)

// The in-memory tree of the listing index is cut into key ranges
// (partitions), each its own B-tree: partition i holds the keys from
// bounds[i-1] (included) to bounds[i] (excluded), the first from the
// lowest key, the last to the highest. A walk goes through the partitions
// in order, so that it costs per key what one tree costs (no merge); a
// large batch of inserts (a restore's) is cut by partition and its parts
// inserted at once by several goroutines, each in trees of its own.
//
// The bounds are chosen from the keys of a large batch (indexPartMin or
// more) that comes when the tree holds fewer items than the batch (those
// move to the new partitions: at most the batch's work again, and a tree
// repartitioned again only by a larger batch), as quantiles of a sample of
// its keys; they stay until the next such batch. Inserts into an empty
// tree in smaller batches (puts) go back to one partition. Nothing depends
// on the partitions' balance but the inserts' parallelism: keys past the
// sample's range go to the first or the last partition.

const (
	// indexParts is the number of partitions a large batch's bounds cut.
	indexParts = 8
	// indexPartMin is the smallest batch whose keys choose bounds, and
	// the smallest that is inserted by several goroutines.
	indexPartMin = 2048
	// indexSample is the most keys of a batch that choose its bounds.
	indexSample = 1024
)

// memPart is one partition of the in-memory tree, and the state its
// comparisons use (so that partitions are searched and changed at once
// by different goroutines). Its goroutine writes the tree's header (its
// length) and hot at every insert: the tree is held by value and the
// struct padded, so that no two partitions' fields share a cache line.
type memPart struct {
	t     btree.BTreeG[uint32]
	probe []byte // the key probeID stands for in a search of t
	// hot is the item being inserted in t, hotKey its key (0, nil: none):
	// the comparisons skip looking it up.
	hot    uint32
	hotKey []byte
	_      [64]byte
}

// newPart makes an empty partition.
func (x *keyIndex) newPart() *memPart {
	p := &memPart{}
	t := x.t
	key := func(item uint32) []byte {
		switch item {
		case probeID:
			return p.probe
		case p.hot:
			return p.hotKey
		}
		return t.keyBytes(t.at(x.recID(item)))
	}
	// A new tree's header, copied before any use, works as the one made.
	p.t = *btree.NewG(64, func(a, b uint32) bool { return keyLess(key(a), key(b)) })
	return p
}

// partOf is the index of the partition that holds key k.
func (x *keyIndex) partOf(k []byte) int {
	b := x.bounds
	if len(b) == 0 {
		return 0
	}
	lo, hi := 0, len(b) // the first bound above k
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if string(k) < b[h] {
			hi = h
		} else {
			lo = h + 1
		}
	}
	return lo
}

// partOfString is partOf for a string key.
func (x *keyIndex) partOfString(k string) int {
	b := x.bounds
	lo, hi := 0, len(b)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if k < b[h] {
			hi = h
		} else {
			lo = h + 1
		}
	}
	return lo
}

// memLen is the number of items in the in-memory tree.
func (x *keyIndex) memLen() int {
	n := 0
	for _, p := range x.parts {
		n += p.t.Len()
	}
	return n
}

// insert lists record id, whose key is k, in p, and returns the entry it
// replaced (0: none), taken out of ent and entOf but not yet freed (its
// ID is not in entFree): p's caller owns p, and writes only the entry's
// own places in ent and entOf, which no other partition reads.
func (x *keyIndex) insertPart(p *memPart, id uint32, k []byte) uint32 {
	// Every comparison of the insert has the new item on one side: its
	// key is at hand.
	p.hot, p.hotKey = id, k
	old, found := p.t.ReplaceOrInsert(id)
	p.hot, p.hotKey = 0, nil
	if !found || old&entryBit == 0 {
		return 0
	}
	e := old &^ entryBit
	x.clearEntry(e)
	return e
}

// planParts chooses the partitions for a batch of inserts ids (x.mu held):
// new bounds from a large batch's keys when the tree holds fewer items,
// one partition again when the tree is empty and the batch small.
func (x *keyIndex) planParts(ids []uint32) {
	if x.pinned {
		return
	}
	n := x.memLen()
	switch {
	case len(ids) >= x.partMin && n < len(ids):
		x.repartition(ids)
	case n == 0 && len(x.parts) > 1:
		x.parts, x.bounds = x.parts[:1], nil
	}
}

// repartition sets bounds from a sample of the keys of ids and moves the
// tree's items to the new partitions (x.mu held).
func (x *keyIndex) repartition(ids []uint32) {
	t := x.t
	step := max(1, len(ids)/indexSample)
	sample := make([]string, 0, len(ids)/step+1)
	for i := 0; i < len(ids); i += step {
		sample = append(sample, string(t.keyBytes(t.at(ids[i]))))
	}
	slices.Sort(sample)
	var bounds []string
	for i := 1; i < x.nparts; i++ {
		b := sample[i*len(sample)/x.nparts]
		if (len(bounds) == 0 && b > sample[0]) || (len(bounds) > 0 && b > bounds[len(bounds)-1]) {
			bounds = append(bounds, b)
		}
	}
	x.setBounds(bounds)
}

// setBounds makes the partitions bounds cut (increasing keys) and moves
// the tree's items to them (x.mu held).
func (x *keyIndex) setBounds(bounds []string) {
	var items []uint32
	for _, p := range x.parts {
		p.t.Ascend(func(item uint32) bool { items = append(items, item); return true })
	}
	x.bounds = bounds
	x.parts = x.parts[:0]
	for range len(bounds) + 1 {
		x.parts = append(x.parts, x.newPart())
	}
	for _, item := range items {
		p := x.parts[x.partOf(x.t.keyBytes(x.rec(item)))]
		p.hot, p.hotKey = item, x.t.keyBytes(x.rec(item))
		p.t.ReplaceOrInsert(item)
		p.hot, p.hotKey = 0, nil
	}
}

// indexWorkers is how many goroutines insert a large batch: the
// processors but two (the restore's decisions and the node's calls keep
// theirs), at least 2, at most indexParts; 1 on one processor.
func indexWorkers() int {
	n := runtime.GOMAXPROCS(0)
	if n < 2 {
		return 1
	}
	return min(indexParts, max(2, n-2))
}

// partResult is what one goroutine of a parallel insert leaves for the
// caller to apply once all have joined: the entries it took out of its
// trees (to free) and the records whose keys leave the disk tier's tree.
type partResult struct {
	freed []uint32
	disk  []uint32
	_     [64]byte // no two goroutines' slices in one cache line
}

// insertParallel inserts ids as insertMu does, with workers goroutines
// (x.mu held; len(x.parts) > 1): each first finds the partitions of a
// slice of the batch, then each inserts the batch's items of whole
// partitions, in the batch's order (the inserts of one key are in one
// partition). What changes state shared by partitions (the free entries'
// list, the disk tier's tree) is done after they joined.
func (x *keyIndex) insertParallel(ids []uint32, workers int) {
	t := x.t
	workers = min(workers, len(x.parts))
	if cap(x.route) < len(ids) {
		x.route = make([]uint8, len(ids))
	}
	route := x.route[:len(ids)]
	parallel(workers, func(w int) {
		lo, hi := w*len(ids)/workers, (w+1)*len(ids)/workers
		for i := lo; i < hi; i++ {
			route[i] = uint8(x.partOf(t.keyBytes(t.at(ids[i]))))
		}
	})
	onDisk := x.disk.Len() > 0
	if len(x.results) < workers {
		x.results = make([]partResult, workers)
	}
	var next atomic.Int32
	parallel(workers, func(w int) {
		res := &x.results[w]
		for {
			pi := int(next.Add(1) - 1)
			if pi >= len(x.parts) {
				return
			}
			p := x.parts[pi]
			for i, id := range ids {
				if int(route[i]) != pi || x.entryOf(id) != 0 {
					continue
				}
				k := t.keyBytes(t.at(id))
				if e := x.insertPart(p, id, k); e != 0 {
					res.freed = append(res.freed, e)
				}
				if onDisk {
					res.disk = append(res.disk, id)
				}
			}
		}
	})
	for w := range workers {
		res := &x.results[w]
		x.entFree = append(x.entFree, res.freed...)
		for _, id := range res.disk {
			x.disk.Delete(string(t.keyBytes(t.at(id))))
		}
		res.freed, res.disk = res.freed[:0], res.disk[:0]
	}
	if cap(x.route) > 1<<20 { // a backlog's batch: not kept
		x.route = nil
	}
}

// parallel runs fn(0) ... fn(n-1), each on its own goroutine but fn(0)
// (the caller's), and returns when all have.
func parallel(n int, fn func(w int)) {
	var wg sync.WaitGroup
	for w := 1; w < n; w++ {
		wg.Go(func() { fn(w) })
	}
	fn(0)
	wg.Wait()
}

// ascendMem calls fn with the items of the in-memory tree whose keys are
// pivot or after, in key order, until it returns false (x.mu held): from
// pivot's partition on, the next ones walked whole. *stop must be set
// when fn returns false (the walk of a partition ends without saying why;
// a flag rather than a wrapper of fn keeps a call per item off the walk).
func (x *keyIndex) ascendMem(pivot string, stop *bool, fn func(item uint32) bool) {
	i := x.partOfString(pivot)
	p := x.parts[i]
	p.probe = append(p.probe[:0], pivot...)
	p.t.AscendGreaterOrEqual(probeID, fn)
	for i++; !*stop && i < len(x.parts); i++ {
		x.parts[i].t.Ascend(fn)
	}
}

// ascendItems calls fn with every item of the in-memory tree in key order
// and its partition's index, until it returns false (x.mu held).
func (x *keyIndex) ascendItems(fn func(part int, item uint32) bool) {
	more := true
	for i := 0; more && i < len(x.parts); i++ {
		x.parts[i].t.Ascend(func(item uint32) bool { more = fn(i, item); return more })
	}
}
