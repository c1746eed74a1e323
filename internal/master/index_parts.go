package master

import (
	"bytes"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

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
// Bounds come from the keys of large batches (indexPartMin or more):
//   - A batch that comes when the tree holds fewer items than it sets the
//     bounds anew, at quantiles of a sample of its keys (the tree's items
//     move to the new partitions: at most the batch's work again).
//   - A partition that takes at least twice its share of a batch (the
//     batch over the goroutines) is cut at quantiles of the batch's keys
//     above all but its highest few items (splitHot: those move). A
//     restore whose keys come in about ascending order (a pool loaded in
//     key order: every insert at the right end of one tree) thus inserts
//     each batch into several new partitions at once, and moves nothing.
//
// Partitions left empty by removals are dropped (their ranges join a
// neighbour's) once they are half of all, and inserts into an empty tree
// in smaller batches (puts) go back to one partition, so that empty
// partitions never pile up under a walk. Nothing depends on the
// partitions' balance but the inserts' parallelism: keys past the
// sample's range go to the first or the last partition.

const (
	// indexParts is the number of partitions a batch's bounds cut when
	// they are set anew.
	indexParts = 8
	// indexPartMin is the smallest batch that sets bounds or cuts a
	// partition, and the smallest inserted by several goroutines.
	indexPartMin = 2048
	// indexSample is the most keys of a batch sampled to set bounds anew;
	// indexSplitSample the most sampled to find partitions to cut.
	indexSample      = 1024
	indexSplitSample = 64
	// indexPiece is the fewest keys of a batch a cut gives a new
	// partition (so that a restore's partitions hold at least that many
	// keys: their overhead, about 250 bytes each, stays under a byte a
	// key).
	indexPiece = 512
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
	if x.free == nil {
		x.free = btree.NewFreeListG[uint32](btree.DefaultFreeListSize)
	}
	// A new tree's header, copied before any use, works as the one made.
	p.t = *btree.NewWithFreeListG(64, func(a, b uint32) bool { return keyLess(key(a), key(b)) }, x.free)
	return p
}

// partOf is the index of the partition that holds key k (read in place
// for the search only).
func (x *keyIndex) partOf(k []byte) int {
	return x.partOfString(unsafe.String(unsafe.SliceData(k), len(k)))
}

// partNear is partOf, tried first at partition guess (the last key's:
// keys in about ascending order, or in runs, fall in the same one).
func (x *keyIndex) partNear(k []byte, guess int) int {
	b := x.bounds
	if guess <= len(b) && (guess == 0 || string(k) >= b[guess-1]) && (guess == len(b) || string(k) < b[guess]) {
		return guess
	}
	return x.partOf(k)
}

// partOfString is partOf for a string key: the first bound above k.
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
func (x *keyIndex) memLen() int { return x.n }

// insertPart lists record id, whose key is k, in p, and returns the entry
// it replaced (0: none), taken out of ent and entOf but not yet freed (its
// ID is not in entFree), and whether the item was added (not replacing
// one). p's caller owns p, and writes only the entry's own places in ent
// and entOf, which no other partition reads.
func (x *keyIndex) insertPart(p *memPart, id uint32, k []byte) (uint32, bool) {
	// Every comparison of the insert has the new item on one side: its
	// key is at hand.
	p.hot, p.hotKey = id, k
	old, found := p.t.ReplaceOrInsert(id)
	p.hot, p.hotKey = 0, nil
	if !found || old&entryBit == 0 {
		return 0, !found
	}
	e := old &^ entryBit
	x.clearEntry(e)
	return e, false
}

// deletePart takes item out of partition i (x.mu held) and returns the
// item taken out. Once removals emptied half the partitions, the empty
// ones are dropped (one pass: O(1) a partition emptied), so that a walk
// passes over at most as many empty partitions as full ones.
func (x *keyIndex) deletePart(i int, item uint32) (uint32, bool) {
	old, found := x.parts[i].t.Delete(item)
	if !found {
		return 0, false
	}
	x.n--
	if x.parts[i].t.Len() == 0 && len(x.parts) > 1 && !x.pinned {
		if x.emptied++; 2*x.emptied >= len(x.parts) {
			x.dropEmpty()
		}
	}
	return old, true
}

// dropEmpty drops the empty partitions but one if all are (x.mu held):
// each one's range joins the one below (the one above for the first).
func (x *keyIndex) dropEmpty() {
	x.emptied = 0
	parts, bounds := x.parts[:0], x.bounds[:0]
	for i, p := range x.parts {
		if p.t.Len() == 0 {
			continue
		}
		if len(parts) > 0 {
			bounds = append(bounds, x.bounds[i-1])
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		parts = append(parts, x.parts[0])
	}
	clear(x.parts[len(parts):])
	x.parts, x.bounds = parts, bounds
}

// planParts chooses the partitions for a batch of inserts ids (x.mu held):
// new bounds from a large batch's keys when the tree holds fewer items,
// one partition again when the tree is empty and the batch small.
func (x *keyIndex) planParts(ids []uint32) {
	if x.pinned {
		return
	}
	switch {
	case len(ids) >= x.partMin && x.n < len(ids):
		x.repartition(ids)
	case x.n == 0 && len(x.parts) > 1:
		x.parts, x.bounds, x.emptied = x.parts[:1], nil, 0
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
	x.bounds, x.emptied = bounds, 0
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

// splitHot cuts the partitions that take at least twice their share of
// the batch ids inserted by workers goroutines, as sampled (x.mu held):
// each at quantiles of the sampled keys above all but its last few items
// (at most 4 times the batch's keys in it: those move to the new
// partitions, at most a few times the batch's own work), into at most
// workers partitions that take at least x.piece keys of the batch each.
// When the batch's keys lie above the partition's items (keys coming in
// about ascending order), nothing moves.
func (x *keyIndex) splitHot(ids []uint32, workers int) {
	if x.pinned {
		return
	}
	t := x.t
	share := max(x.piece, len(ids)/workers)
	step := max(1, len(ids)/indexSplitSample)
	type sampled struct {
		part int
		key  []byte
	}
	sample := make([]sampled, 0, len(ids)/step+1)
	guess := 0
	for i := 0; i < len(ids); i += step {
		k := t.keyBytes(t.at(ids[i]))
		guess = x.partNear(k, guess)
		sample = append(sample, sampled{guess, k})
	}
	slices.SortFunc(sample, func(a, b sampled) int {
		if a.part != b.part {
			return a.part - b.part
		}
		return bytes.Compare(a.key, b.key)
	})
	// From the last partition down, so that cutting one leaves the
	// indexes of those below as they are.
	for hi := len(sample); hi > 0; {
		p := sample[hi-1].part
		lo := hi - 1
		for lo > 0 && sample[lo-1].part == p {
			lo--
		}
		run := sample[lo:hi]
		hi = lo
		if len(run)*step < 2*share {
			continue
		}
		part := x.parts[p]
		above := run
		if limit := 4 * len(run) * step; part.t.Len() > limit {
			// The keys above the partition's limit+1-th highest item.
			var floor uint32
			seen := 0
			part.t.Descend(func(item uint32) bool { seen++; floor = item; return seen <= limit })
			fk := t.keyBytes(x.rec(floor))
			i, _ := slices.BinarySearchFunc(run, fk, func(s sampled, k []byte) int { return bytes.Compare(s.key, k) })
			for i < len(run) && bytes.Equal(run[i].key, fk) {
				i++
			}
			above = run[i:]
		}
		cuts := min(workers, len(above)*step/share)
		if cuts < 2 {
			continue
		}
		// Each bound above the last, the first above the lowest key
		// sampled and the partition's lower bound: every partition keeps
		// or takes keys of the batch.
		var bounds []string
		prev := string(above[0].key)
		if p > 0 {
			prev = max(prev, x.bounds[p-1])
		}
		for j := 1; j < cuts; j++ {
			if b := above[j*len(above)/cuts].key; string(b) > prev {
				bounds = append(bounds, string(b))
				prev = bounds[len(bounds)-1]
			}
		}
		if len(bounds) == 0 {
			continue
		}
		added := make([]*memPart, len(bounds))
		for j := range added {
			added[j] = x.newPart()
		}
		// The partition's items from the first new bound on move (its
		// highest: taken off its right end).
		var moved []uint32
		for {
			top, ok := part.t.Max()
			if !ok || string(t.keyBytes(x.rec(top))) < bounds[0] {
				break
			}
			part.t.DeleteMax()
			moved = append(moved, top)
		}
		x.parts = slices.Insert(x.parts, p+1, added...)
		x.bounds = slices.Insert(x.bounds, p, bounds...)
		for _, item := range moved {
			k := t.keyBytes(x.rec(item))
			q := x.parts[x.partOf(k)]
			q.hot, q.hotKey = item, k
			q.t.ReplaceOrInsert(item)
			q.hot, q.hotKey = 0, nil
		}
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
// trees (to free), the records whose keys leave the disk tier's tree, and
// the items it added.
type partResult struct {
	freed []uint32
	disk  []uint32
	added int
	_     [64]byte // no two goroutines' results in one cache line
}

// partWork is the part of a parallel insert in one partition: the IDs
// grouped[lo:hi].
type partWork struct{ part, lo, hi int }

// insertParallel inserts ids as insertMu does, with workers goroutines
// (x.mu held): hot partitions cut first (splitHot; one partition left:
// the inserts made in order by the caller), each goroutine then
// finds the partitions of a slice of the batch, and each inserts the
// batch's items of whole partitions, in the batch's order (the inserts of
// one key are in one partition). What changes state shared by partitions
// (the free entries' list, the disk tier's tree, the count) is done after
// they joined.
func (x *keyIndex) insertParallel(ids []uint32, workers int) {
	t := x.t
	x.splitHot(ids, workers)
	if len(x.parts) == 1 {
		x.insertSeq(ids)
		return
	}
	if cap(x.route) < len(ids) {
		x.route = make([]int32, len(ids))
		x.grouped = make([]uint32, len(ids))
	}
	route, grouped := x.route[:len(ids)], x.grouped[:len(ids)]
	parallel(workers, func(w int) {
		guess := 0
		for i := w * len(ids) / workers; i < (w+1)*len(ids)/workers; i++ {
			guess = x.partNear(t.keyBytes(t.at(ids[i])), guess)
			route[i] = int32(guess)
		}
	})
	// The IDs grouped by partition, in the batch's order in each.
	if len(x.counts) < len(x.parts) {
		x.counts = make([]int32, len(x.parts)+len(x.parts)/4)
	}
	counts := x.counts
	work := x.work[:0]
	for _, p := range route {
		if counts[p] == 0 {
			work = append(work, partWork{part: int(p)})
		}
		counts[p]++
	}
	at := 0
	for i := range work {
		w := &work[i]
		w.lo, w.hi = at, at
		at += int(counts[w.part])
		counts[w.part] = int32(i) // the partition's work, until the IDs are placed
	}
	for i, p := range route {
		w := &work[counts[p]]
		grouped[w.hi] = ids[i]
		w.hi++
	}
	for _, w := range work {
		counts[w.part] = 0
	}
	x.work = work
	workers = min(workers, len(work))
	onDisk := x.disk.Len() > 0
	if len(x.results) < workers {
		x.results = make([]partResult, workers)
	}
	var next atomic.Int32
	parallel(workers, func(w int) {
		res := &x.results[w]
		for {
			i := int(next.Add(1) - 1)
			if i >= len(work) {
				return
			}
			p := x.parts[work[i].part]
			for _, id := range grouped[work[i].lo:work[i].hi] {
				if x.entryOf(id) != 0 {
					continue
				}
				k := t.keyBytes(t.at(id))
				e, added := x.insertPart(p, id, k)
				if e != 0 {
					res.freed = append(res.freed, e)
				}
				if added {
					res.added++
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
		x.n += res.added
		res.freed, res.disk, res.added = res.freed[:0], res.disk[:0], 0
	}
	if cap(x.route) > 1<<20 { // a backlog's batch: not kept
		x.route, x.grouped = nil, nil
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
