package hotcache

import "hash/maphash"

// sketchDepth is the number of rows of the count-min sketch.
const sketchDepth = 4

// sketch is a count-min sketch of 8-bit counters behind a doorkeeper bloom
// filter (TinyLFU). Not safe for concurrent use: Cache guards it.
type sketch struct {
	seed   maphash.Seed
	mask   uint64               // width-1 (width is a power of two)
	rows   [sketchDepth][]uint8 // counters
	door   []uint64             // doorkeeper bits (width*8 of them)
	adds   uint64               // accesses recorded since the last halving
	period uint64               // halve every period accesses (width x depth)
}

func newSketch(width int) *sketch {
	w := 1
	for w < width {
		w <<= 1
	}
	s := &sketch{seed: maphash.MakeSeed(), mask: uint64(w - 1), door: make([]uint64, w/8+1), period: uint64(w * sketchDepth)}
	for i := range s.rows {
		s.rows[i] = make([]uint8, w)
	}
	return s
}

// hash is key's 64-bit hash; the row indexes and doorkeeper bits are drawn
// from it by double hashing.
func (s *sketch) hash(key string) uint64 { return maphash.String(s.seed, key) }

func (s *sketch) index(h uint64, i int) uint64 {
	h1, h2 := h, (h>>32)|1
	return (h1 + uint64(i)*h2) & s.mask
}

// doorBits are the two doorkeeper bits of h.
func (s *sketch) doorBits(h uint64) (uint64, uint64) {
	n := uint64(len(s.door)) * 64
	return h % n, ((h >> 23) * 0x9e3779b97f4a7c15) % n
}

func (s *sketch) inDoor(h uint64) bool {
	a, b := s.doorBits(h)
	return s.door[a/64]&(1<<(a%64)) != 0 && s.door[b/64]&(1<<(b%64)) != 0
}

// add records one access of the key hashed to h and returns its estimate
// afterwards.
func (s *sketch) add(h uint64) int {
	if !s.inDoor(h) { // the first access lands in the doorkeeper only
		a, b := s.doorBits(h)
		s.door[a/64] |= 1 << (a % 64)
		s.door[b/64] |= 1 << (b % 64)
	} else {
		for i := range s.rows {
			if c := &s.rows[i][s.index(h, i)]; *c < 255 {
				*c++
			}
		}
	}
	est := s.estimate(h)
	if s.adds++; s.adds >= s.period {
		s.halve()
	}
	return est
}

// estimate is the estimated access count of the key hashed to h: the
// doorkeeper's bit plus the smallest of its counters.
func (s *sketch) estimate(h uint64) int {
	m := uint8(255)
	for i := range s.rows {
		m = min(m, s.rows[i][s.index(h, i)])
	}
	if s.inDoor(h) {
		return 1 + int(m)
	}
	return int(m)
}

// halve ages the sketch: every counter halved, the doorkeeper cleared.
func (s *sketch) halve() {
	for i := range s.rows {
		for j := range s.rows[i] {
			s.rows[i][j] >>= 1
		}
	}
	clear(s.door)
	s.adds = 0
}
