package master

import (
	"bytes"
	"hash/maphash"
	"math/bits"
	"sync"
	"unsafe"
)

// The object table: the master's memory per object is its records, so they
// are laid out for it. An object is a record (object, 96 bytes, no
// pointers) stored by value in chunks of recChunk records and named by a
// 32-bit record ID; its key lies in a byte arena (chunks of arenaChunk
// bytes, referenced from the record by chunk, offset and length); its first
// replica is in the record, further ones in a side table (more) that only
// objects with several replicas use; the key -> record lookup is an open-
// addressing hash table of 8-byte slots (ID and 32 bits of the key's hash,
// so a probe compares keys only when the hashes agree). None of these holds
// a pointer, so a garbage collection marks a few large blocks whatever the
// number of objects, and the heap per object is its record, its key's bytes,
// and about 12 bytes of hash slot.
//
// A freed record keeps its fields (but its owner and side-table replicas)
// and its key's bytes until the next add reuses it (with those bytes, when
// the new key fits in them) or the arena is compacted (compact, from
// Master.shrinkLocked, once the arena's dead bytes exceed its live ones): a
// caller may read a freed object's key and fields until it adds an object
// or shrinks the table.
type objTable struct {
	recs [][]object // chunks of recChunk records; ID 0 is never used
	next uint32     // records handed out so far (IDs below it exist)
	free []uint32   // IDs of freed records, reused last-freed first
	n    int        // live records

	arena            [][]byte // key bytes, chunks of arenaChunk (or one long key) filled in order
	arenaUsed        int      // bytes filled in the last chunk
	keyLive, keyDead uint64   // bytes of live and of freed keys in the arena

	slots []uint64 // hash index: 0 empty, else hash<<32 | ID
	sink  uint64   // what touch read (so that its loads are kept)

	more map[uint32][]replica // replicas of objects holding more than one, by ID

	owners    []string // owner IDs by handle (0 = none)
	ownerRefs []int32
	ownerIdx  map[string]uint32
	ownerFree []uint32

	reserved int // objects the hash index was sized for (reserve)

	// stock, when set, holds chunks made ahead of need (stock.go).
	stock *chunkStock

	// dirMu, when set, is held while the table changes what the listing
	// index's comparisons read without the Master's lock (list.go): the
	// directories of record and arena chunks (grown), and every key's
	// place (compact). A chunk's slice header never changes once made, and
	// an indexed record's key stays where it is until compact.
	dirMu sync.Locker
}

// lockDirs and unlockDirs hold dirMu (when set) around a change of what
// the listing index reads.
func (t *objTable) lockDirs() {
	if t.dirMu != nil {
		t.dirMu.Lock()
	}
}

func (t *objTable) unlockDirs() {
	if t.dirMu != nil {
		t.dirMu.Unlock()
	}
}

const (
	recShift   = 16
	recChunk   = 1 << recShift // records per chunk (6 MiB)
	arenaChunk = 1 << 20       // bytes per arena chunk: Config.MaxKeyLen is at most this
	minSlots   = 64
)

func newObjTable() *objTable {
	return &objTable{more: map[uint32][]replica{}, ownerIdx: map[string]uint32{},
		owners: []string{""}, ownerRefs: []int32{0}, next: 1}
}

// Records lie in chunks that never move: below recChunk IDs, chunks of 64,
// 64, 128, ... 32768 records (a small master does not hold 6 MiB of
// records), then chunks of recChunk.
const smallChunks = recShift - 5 // chunks below ID recChunk

// chunkOf is the chunk of ID id and its first ID.
func chunkOf(id uint32) (chunk int, base uint32) {
	if id >= recChunk {
		return smallChunks - 1 + int(id>>recShift), id &^ (recChunk - 1)
	}
	c := bits.Len32(id >> 6)
	if c == 0 {
		return 0, 0
	}
	return c, 64 << (c - 1)
}

// at is the record of ID id.
func (t *objTable) at(id uint32) *object {
	if id >= recChunk {
		return &t.recs[smallChunks-1+int(id>>recShift)][id&(recChunk-1)]
	}
	c, base := chunkOf(id)
	return &t.recs[c][id-base]
}

// len is the number of objects.
func (t *objTable) len() int { return t.n }

// reusable is the memory the table holds for objects it no longer has:
// freed records and the key bytes of removed objects.
func (t *objTable) reusable() uint64 {
	return uint64(len(t.free))*uint64(unsafe.Sizeof(object{})) + t.keyDead
}

func (t *objTable) hash(key string) uint32 { return keyHash(key) }

// keySeed seeds the hash of the object tables' keys: fixed for the
// process, so that a caller can hash keys before it takes the lock
// (keyHash) and pass the hashes in (getHashed, addHashed).
var keySeed = maphash.MakeSeed()

// keyHash is the hash of key in the object table's index.
func keyHash(key string) uint32 { return uint32(maphash.String(keySeed, key) >> 32) }

// keyHashBytes is keyHash of the key in k (maphash hashes a string and its
// bytes alike), without a string to allocate.
func keyHashBytes(k []byte) uint32 { return uint32(maphash.Bytes(keySeed, k) >> 32) }

// touch reads the hash slots of the hashes hs (of keys about to be looked
// up): the loads do not depend on each other, so the processor overlaps
// their cache misses, and the lookups that follow find the slots cached.
// At millions of objects a lookup's slot is a miss to memory otherwise.
func (t *objTable) touch(hs []uint32) {
	if len(t.slots) == 0 {
		return
	}
	mask := uint64(len(t.slots) - 1)
	var x uint64
	for _, h := range hs {
		x += t.slots[uint64(h)&mask]
	}
	t.sink = x
}

// keyBytes is o's key in the arena (valid until the arena is compacted;
// never written over).
func (t *objTable) keyBytes(o *object) []byte {
	k := o.key
	return t.arena[k.chunk()][k.off() : k.off()+k.len()]
}

// key is o's key as a string of its own.
func (t *objTable) key(o *object) string { return string(t.keyBytes(o)) }

// get is the object of key, nil when there is none.
func (t *objTable) get(key string) *object { return t.getHashed(key, t.hash(key)) }

// getHashed is get of key whose keyHash is h.
func (t *objTable) getHashed(key string, h uint32) *object {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := uint64(h) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return nil
		}
		if uint32(s>>32) == h {
			if o := t.at(uint32(s)); string(t.keyBytes(o)) == key {
				return o
			}
		}
	}
}

// add stores a new object with key (not in the table) and the fields of
// rec, and returns its record. Its replicas are set by setReps.
func (t *objTable) add(key string, rec object) *object { return t.addHashed(key, t.hash(key), rec) }

// addHashed is add of key whose keyHash is h.
func (t *objTable) addHashed(key string, h uint32, rec object) *object {
	if (t.n+1)*8 > len(t.slots)*7 {
		t.rehash(max(minSlots, len(t.slots)*2))
	}
	var id uint32
	var old keyLoc // the key space of the freed record reused, if any
	if k := len(t.free); k > 0 {
		id, t.free = t.free[k-1], t.free[:k-1]
		old = t.at(id).key
	} else {
		id = t.next
		if c, base := chunkOf(id); c == len(t.recs) {
			size := max(64, min(recChunk, int(base)))
			var chunk []object
			if size == recChunk && t.stock != nil {
				chunk = t.stock.takeRecs()
			}
			if chunk == nil {
				chunk = make([]object, size)
			}
			t.lockDirs()
			t.recs = append(t.recs, chunk)
			t.unlockDirs()
		}
		t.next++
	}
	o := t.at(id)
	*o = rec
	o.id, o.nrep, o.owner = id, 0, 0
	o.r0 = [1]replica{}
	if old.len() >= len(key) && len(key) > 0 {
		// The freed key's bytes take the new key: keys of one length
		// (the usual case) churn without growing the arena.
		copy(t.arena[old.chunk()][old.off():], key)
		o.key = makeKeyLoc(old.chunk(), old.off(), len(key))
		t.keyDead -= uint64(len(key))
		t.keyLive += uint64(len(key))
	} else {
		t.putKey(o, key)
	}
	t.n++
	t.insertSlot(h, id)
	return o
}

// reserve sizes the hash index for n more objects; compact leaves it that
// size until they came (or the table empties).
func (t *objTable) reserve(n int) {
	t.reserved = t.n + n
	if need := (t.n + n) * 8 / 7; need > len(t.slots) {
		t.rehash(max(minSlots, 1<<bits.Len(uint(need))))
	}
}

// putKey copies key into the arena as o's key.
func (t *objTable) putKey(o *object, key string) { putKey(t, o, key) }

func putKey[S string | []byte](t *objTable, o *object, key S) {
	c := len(t.arena) - 1
	if c < 0 || t.arenaUsed+len(key) > len(t.arena[c]) {
		var chunk []byte
		if len(key) <= arenaChunk && t.stock != nil {
			chunk = t.stock.takeKeys()
		}
		if chunk == nil {
			chunk = make([]byte, max(arenaChunk, len(key)))
		}
		t.lockDirs()
		t.arena = append(t.arena, chunk)
		t.unlockDirs()
		c, t.arenaUsed = c+1, 0
	}
	off := t.arenaUsed
	t.arenaUsed += copy(t.arena[c][off:], key)
	o.key = makeKeyLoc(c, off, len(key))
	t.keyLive += uint64(len(key))
}

func (t *objTable) insertSlot(h, id uint32) {
	mask := uint64(len(t.slots) - 1)
	i := uint64(h) & mask
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = uint64(h)<<32 | uint64(id)
}

// deleteSlot takes ID id (of hash h) out of the hash index, shifting the
// entries after it back (linear probing without tombstones).
func (t *objTable) deleteSlot(h, id uint32) {
	mask := uint64(len(t.slots) - 1)
	want := uint64(h)<<32 | uint64(id)
	i := uint64(h) & mask
	for t.slots[i] != want {
		if t.slots[i] == 0 {
			panic("master: object missing from the hash index")
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := t.slots[j]
		if s == 0 {
			break
		}
		home := (s >> 32) & mask
		// s may move to i if its home is not in (i, j] cyclically.
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = 0
}

// rehash rebuilds the hash index with size slots (a power of two).
func (t *objTable) rehash(size int) {
	old := t.slots
	t.slots = make([]uint64, size)
	for _, s := range old {
		if s != 0 {
			t.insertSlot(uint32(s>>32), uint32(s))
		}
	}
}

// del forgets o: its key leaves the hash index, its record and its key's
// bytes are free (reused after the caller's hold of the lock: see above).
func (t *objTable) del(o *object) {
	t.deleteSlot(keyHashBytes(t.keyBytes(o)), o.id)
	t.dropKeyOf(o)
	t.setOwner(o, "")
	if o.nrep > 1 {
		delete(t.more, o.id)
	}
	t.free = append(t.free, o.id)
	t.n--
}

func (t *objTable) dropKeyOf(o *object) {
	t.keyLive -= uint64(o.key.len())
	t.keyDead += uint64(o.key.len())
}

// rekeyHashed gives o, whose key's keyHash is old, the key key (not in
// the table), whose keyHash is h (callers hash before they take the lock).
func (t *objTable) rekeyHashed(o *object, old uint32, key string, h uint32) {
	t.deleteSlot(old, o.id)
	t.dropKeyOf(o)
	t.putKey(o, key)
	t.insertSlot(h, o.id)
}

// handKey gives s, an object about to lose its key (whose keyHash is sh),
// o's key (whose keyHash is h) and o the key key (keyHash kh, not in the
// table), in one step: s takes o's place in the hash index and its key's
// bytes where they lie, and key is written over s's old key's bytes when
// it fits there (a client's slot names are of one length), so a commit
// that reuses the version it replaces as the next slot (slot_reuse.go)
// grows the arena by nothing. Neither s's old bytes nor o's are an indexed
// record's key meanwhile: s was an unfinished put, and o's bytes stay
// where they are, s's.
func (t *objTable) handKey(o, s *object, h, sh uint32, key string, kh uint32) {
	t.deleteSlot(sh, s.id)
	t.replaceSlot(h, o.id, s.id)
	old := s.key
	s.key = o.key
	if n := len(key); n > 0 && n <= old.len() {
		copy(t.arena[old.chunk()][old.off():], key)
		o.key = makeKeyLoc(old.chunk(), old.off(), n)
		t.keyLive -= uint64(old.len() - n)
		t.keyDead += uint64(old.len() - n)
	} else {
		t.keyLive -= uint64(old.len())
		t.keyDead += uint64(old.len())
		t.putKey(o, key)
	}
	t.insertSlot(kh, o.id)
}

// replaceSlot makes the hash index's entry of ID id (of hash h) name ID to
// instead, an object of the same key.
func (t *objTable) replaceSlot(h, id, to uint32) {
	mask := uint64(len(t.slots) - 1)
	want := uint64(h)<<32 | uint64(id)
	for i := uint64(h) & mask; ; i = (i + 1) & mask {
		switch t.slots[i] {
		case want:
			t.slots[i] = uint64(h)<<32 | uint64(to)
			return
		case 0:
			panic("master: object missing from the hash index")
		}
	}
}

// each calls fn with every object until it returns false.
func (t *objTable) each(fn func(o *object) bool) {
	for _, s := range t.slots {
		if s != 0 && !fn(t.at(uint32(s))) {
			return
		}
	}
}

// sample calls fn with up to n objects from a random place of the hash
// index on (start, a random number), until it returns false.
func (t *objTable) sample(start uint64, n int, fn func(o *object) bool) {
	if t.n == 0 {
		return
	}
	mask := uint64(len(t.slots) - 1)
	for i, seen := start&mask, 0; seen < min(n, t.n); i = (i + 1) & mask {
		if s := t.slots[i]; s != 0 {
			seen++
			if !fn(t.at(uint32(s))) {
				return
			}
		}
	}
}

// reps are o's replicas. With one replica the slice is o's own field:
// change them with setReps only.
func (t *objTable) reps(o *object) []replica {
	switch o.nrep {
	case 0:
		return nil
	case 1:
		return o.r0[:]
	}
	return t.more[o.id]
}

// setRep makes r o's only replica: setReps of one, without a slice to
// allocate (a restore sets one per report).
func (t *objTable) setRep(o *object, r replica) {
	if o.nrep > 1 {
		delete(t.more, o.id)
	}
	o.r0[0], o.nrep = r, 1
}

// setReps makes rs (which may alias reps(o)) o's replicas.
func (t *objTable) setReps(o *object, rs []replica) {
	if len(rs) <= 1 {
		if o.nrep > 1 {
			delete(t.more, o.id)
		}
		if len(rs) == 1 {
			o.r0[0] = rs[0]
		}
		o.nrep = uint8(len(rs))
		return
	}
	if o.nrep > 1 && &t.more[o.id][0] == &rs[0] {
		t.more[o.id] = rs
	} else {
		t.more[o.id] = append([]replica(nil), rs...)
	}
	o.nrep = uint8(len(rs))
}

// owner is the ID of the client that put o ("" for a restored object).
func (t *objTable) owner(o *object) string { return t.owners[o.owner] }

// setOwner makes client o's owner ("" = none); owner IDs are interned with
// a count of the objects naming them.
func (t *objTable) setOwner(o *object, client string) {
	if o.owner != 0 && t.owners[o.owner] == client {
		return // already its owner (a client's upsert of its own key)
	}
	if o.owner != 0 {
		if t.ownerRefs[o.owner]--; t.ownerRefs[o.owner] == 0 {
			delete(t.ownerIdx, t.owners[o.owner])
			t.owners[o.owner] = ""
			t.ownerFree = append(t.ownerFree, o.owner)
		}
		o.owner = 0
	}
	if client == "" {
		return
	}
	h, ok := t.ownerIdx[client]
	if !ok {
		if k := len(t.ownerFree); k > 0 {
			h, t.ownerFree = t.ownerFree[k-1], t.ownerFree[:k-1]
			t.owners[h] = client
		} else {
			h = uint32(len(t.owners))
			t.owners, t.ownerRefs = append(t.owners, client), append(t.ownerRefs, 0)
		}
		t.ownerIdx[client] = h
	}
	t.ownerRefs[h]++
	o.owner = h
}

// compact returns memory after removals: with no object left every chunk
// goes; the hash index is rebuilt at a quarter of its size once it is
// filled below 1/32; the arena is rewritten once its freed bytes exceed its
// live ones (and a chunk). Records of freed IDs stay in their chunks, for
// later objects.
func (t *objTable) compact() {
	dirMu := t.dirMu // held throughout: the growth of the new arena does not take it again
	t.lockDirs()
	t.dirMu = nil
	defer func() {
		t.dirMu = dirMu
		t.unlockDirs()
	}()
	if t.n == 0 && t.next > 1 {
		stock := t.stock
		*t = *newObjTable()
		t.stock = stock
		return
	}
	if t.n >= t.reserved {
		t.reserved = 0
	}
	if len(t.slots) > minSlots && t.n*32 < len(t.slots) && t.reserved == 0 {
		t.rehash(max(minSlots, 1<<bits.Len(uint(t.n*2))))
	}
	if t.keyDead > arenaCompactMin && t.keyDead > t.keyLive {
		old := t.arena
		t.arena, t.arenaUsed, t.keyLive, t.keyDead = nil, 0, 0, 0
		for _, id := range t.free {
			t.at(id).key = 0 // its bytes are not copied: no space to reuse
		}
		t.each(func(o *object) bool {
			k := o.key
			putKey(t, o, old[k.chunk()][k.off():k.off()+k.len()])
			return true
		})
	}
}

// maxObjectReplicas is the most replicas one object holds (its record
// counts them in a byte): Config.Validate caps MaxReplicas, and copy tasks
// and restores add none past it.
const maxObjectReplicas = 255

// arenaCompactMin is the freed key bytes below which the arena is not
// compacted (the tests lower it, to compact often).
var arenaCompactMin uint64 = arenaChunk

// keyLess orders two keys of the arena.
func keyLess(a, b []byte) bool { return bytes.Compare(a, b) < 0 }
