package conductor

import "unsafe"

// table is an open-addressing hash table from u64 keys to values of V,
// linear probing, deletion by backward shift (no tombstones), grown at 3/4
// load. Hand-written rather than a Go map because the index's keys are
// already hashes and its entries are small: one slot of key and value
// sits in one cache line, a lookup touches one line, and memory per block
// is a third of a map's. Key 0 lives outside the slots (0 marks empty).
type table[V any] struct {
	slots   []slot[V]
	shift   uint // 64 - log2(len(slots))
	n       int  // keys in slots
	hasZero bool
	zero    V
}

type slot[V any] struct {
	key uint64
	val V
}

const fib = 0x9E3779B97F4A7C15

// hugeTable is the slot array size from which a table asks for huge
// pages (adviseHuge).
const hugeTable = 4 << 20

func (t *table[V]) Len() int {
	if t.hasZero {
		return t.n + 1
	}
	return t.n
}

// home is k's first slot: an even one (see index).
func (t *table[V]) home(k uint64) int { return int((k*fib)>>t.shift) &^ 1 }

// Get returns the value of k.
func (t *table[V]) Get(k uint64) (V, bool) {
	if k == 0 {
		return t.zero, t.hasZero
	}
	if j := t.index(k); j >= 0 {
		return t.slots[j].val, true
	}
	var z V
	return z, false
}

// slotsOf sets at[i] to the slot of keys[i] in the block table: -1 when
// absent, atZero for key 0 (held outside the slots). Written for the
// concrete type and in two passes: the first finds each key in its home
// pair with no call and no branch on the keys (a generic method's body is
// compiled once per memory shape and calls index through a dictionary,
// and a call in the loop makes every value spill around it); the second
// follows the run of the rarer key that is past its pair. The caller
// reads the values in place: copying them out (24 bytes) and reading them
// back stalls on store forwarding, which costs more than the lookup.
func slotsOf(t *table[masks], keys []uint64, at []int32) {
	at = at[:len(keys)]
	slots := t.slots
	if len(slots) == 0 || t.n == 0 {
		for i, k := range keys {
			at[i] = -1
			if k == 0 && t.hasZero {
				at[i] = atZero
			}
		}
		return
	}
	mask := len(slots) - 1
	shift := t.shift & 63
	slow := false
	for i, k := range keys {
		h := int((k*fib)>>shift) &^ 1
		j0, j1 := h&mask, (h+1)&mask
		k0, k1 := slots[j0].key, slots[j1].key
		a := int32(atRun) // not in the pair, and the run goes on
		if min(k0, k1) == 0 {
			a = -1 // an empty slot ends the run: absent
		}
		if k0 == k {
			a = int32(j0)
		}
		if k1 == k {
			a = int32(j1)
		}
		at[i] = a
		slow = slow || a == atRun || k == 0
	}
	if !slow {
		return
	}
	for i, k := range keys {
		switch {
		case k == 0:
			at[i] = -1
			if t.hasZero {
				at[i] = atZero
			}
		case at[i] == atRun:
			h := int((k*fib)>>shift) &^ 1
			at[i] = -1
			for j := (h + 2) & mask; slots[j].key != 0; j = (j + 1) & mask {
				if slots[j].key == k {
					at[i] = int32(j)
					break
				}
			}
		}
	}
}

// slotsOf's marks besides slot numbers.
const (
	atZero = -2 // key 0: the table's zero entry
	atRun  = -3 // (internal) look further
)

// index is k's slot, -1 when absent (or k is 0). Keys' homes are even
// slots and a slot pair shares a cache line, so the pair is compared
// without a branch on each slot: how far a key sits from its home varies
// from key to key, and a probe loop's exit branch mispredicted once per
// lookup costs more than the lookup's memory access when it hits the
// cache. Runs longer than the pair take the probe loop.
func (t *table[V]) index(k uint64) int {
	if t.n == 0 || k == 0 {
		return -1
	}
	slots := t.slots
	mask := len(slots) - 1
	j0 := t.home(k)
	j1 := (j0 + 1) & mask
	k0, k1 := slots[j0].key, slots[j1].key
	at := -1
	if k0 == k {
		at = j0
	}
	if k1 == k {
		at = j1
	}
	if at >= 0 || min(k0, k1) == 0 {
		return at // found, or an empty slot ends the run before it
	}
	for j := (j1 + 1) & mask; ; j = (j + 1) & mask {
		switch slots[j].key {
		case k:
			return j
		case 0:
			return -1
		}
	}
}

// Find returns a pointer to k's value, nil when absent. The pointer is
// valid until the next insertion or deletion.
func (t *table[V]) Find(k uint64) *V {
	if k == 0 {
		if t.hasZero {
			return &t.zero
		}
		return nil
	}
	if j := t.index(k); j >= 0 {
		return &t.slots[j].val
	}
	return nil
}

// Ptr returns a pointer to k's value, inserting the zero value when k is
// absent (inserted true). The pointer is valid until the next insertion.
func (t *table[V]) Ptr(k uint64) (v *V, inserted bool) {
	if k == 0 {
		ins := !t.hasZero
		t.hasZero = true
		return &t.zero, ins
	}
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k {
			return &s.val, false
		}
		if s.key == 0 {
			s.key = k
			t.n++
			return &s.val, true
		}
	}
}

// Delete removes k.
func (t *table[V]) Delete(k uint64) {
	if k == 0 {
		var z V
		t.hasZero, t.zero = false, z
		return
	}
	if t.n == 0 {
		return
	}
	mask := len(t.slots) - 1
	i := t.home(k)
	for {
		if t.slots[i].key == k {
			break
		}
		if t.slots[i].key == 0 {
			return
		}
		i = (i + 1) & mask
	}
	// Backward shift: move later entries of the run into the hole when
	// the hole lies between their home and them.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		kj := t.slots[j].key
		if kj == 0 {
			break
		}
		h := t.home(kj)
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot[V]{}
	t.n--
}

// Range calls f for every key and value until it returns false. f must
// not insert or delete.
func (t *table[V]) Range(f func(k uint64, v V) bool) {
	if t.hasZero && !f(0, t.zero) {
		return
	}
	for i := range t.slots {
		if t.slots[i].key != 0 && !f(t.slots[i].key, t.slots[i].val) {
			return
		}
	}
}

func (t *table[V]) grow() {
	old := t.slots
	size := 2 * len(old)
	if size < 16 {
		size = 16
	}
	t.slots = make([]slot[V], size)
	if b := unsafe.Sizeof(t.slots[0]) * uintptr(size); b >= hugeTable {
		adviseHuge(unsafe.Pointer(&t.slots[0]), b)
	}
	t.shift = 64
	for s := size; s > 1; s >>= 1 {
		t.shift--
	}
	mask := size - 1
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := t.home(s.key)
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
