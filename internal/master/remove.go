package master

import (
	"fmt"
	"regexp"
	"strings"
)

// Remove deletes a complete object. A leased object is refused with
// ErrObjectHasLease unless force; force also removes an unfinished put.
func (m *Master) Remove(key string, force bool) error {
	_, err := m.RemoveHeaders(key, force)
	return err
}

// RemoveHeaders is Remove that also returns the tombstones of the key (its
// headers and those of older versions not zeroed yet; Config.Durable), for
// the caller to zero before it reports the remove done.
func (m *Master) RemoveHeaders(key string, force bool) ([]HeaderRef, error) {
	if err := m.checkKey(key); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects.get(key)
	if (o == nil || !o.complete) && m.disk[key] != nil {
		m.goneDiskLocked(key)
		m.stats.Removes++
		return nil, nil
	}
	if o == nil || (!o.complete && !force) {
		return nil, fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	if !force && o.leaseUntil.after(m.clock.Now()) {
		m.stats.LeaseRejections++
		return nil, fmt.Errorf("%w: %q", ErrObjectHasLease, key)
	}
	if !o.complete {
		// A forced remove of a put in progress: its writer may still be
		// writing, so the space stays reserved as a preempted put's does.
		m.goneLocked(o)
		m.reserveUnfinishedLocked(o)
	} else {
		m.freeLocked(o)
	}
	m.stats.Removes++
	m.shrinkLocked()
	return m.tombsOfLocked(map[string]bool{key: true}), nil
}

// Bulk removal (RemoveByRegex, RemoveAll) walks the listing index in key
// order, one chunk per hold of the lock: a chunk removes at most
// RemoveChunk objects and passes over at most removeScan keys, so the lock
// is never held for work that grows with the pool, and each chunk's answer
// (its tombstones) is bounded. A caller gets the cursor of the next chunk
// and goes on from there (the store client does, zeroing each chunk's
// headers before it asks for the next); the calls without a cursor run every
// chunk, releasing the lock between chunks. Keys put while a removal runs
// are removed when they sort after its cursor, kept otherwise.

// RemoveChunk is the most objects one chunk of a bulk removal removes.
const RemoveChunk = 2048

// removeScan is the most keys one chunk of a bulk removal passes over.
const removeScan = 16 * 1024

// MaxPageTombstones bounds the tombstones of one chunk of a bulk removal
// (about 60 bytes each on the wire): a chunk ends early once its keys carry
// this many, so its answer stays far below gRPC's 4 MiB.
const MaxPageTombstones = 16 * 1024

// RemovePage is one chunk of a bulk removal.
type RemovePage struct {
	Removed    int         // objects and disk-only copies removed by this chunk
	Tombstones []HeaderRef // headers of the removed keys to zero
	Next       string      // cursor of the next chunk; "" when the removal is done
}

// Matcher selects the keys of a bulk removal: Match tests a key, and every
// key it can match starts with Prefix.
type Matcher struct {
	Prefix string
	Match  func(key string) bool
}

// RegexMatcher compiles an RE2 pattern into a Matcher; a pattern anchored
// at the start (^) with a literal prefix only walks the keys with it.
func RegexMatcher(pattern string) (Matcher, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return Matcher{}, fmt.Errorf("%w: bad regex: %v", ErrInvalidParams, err)
	}
	mt := Matcher{Match: re.MatchString}
	if strings.HasPrefix(pattern, "^") {
		mt.Prefix, _ = re.LiteralPrefix()
	}
	return mt, nil
}

// AllMatcher matches every key.
var AllMatcher = Matcher{Match: func(string) bool { return true }}

// RemovePageFrom removes one chunk of the keys mt selects that sort after
// the cursor `after` ("" = from the start), skipping leased objects unless
// force; limit (<= 0 or above RemoveChunk: RemoveChunk) bounds the objects
// it removes.
func (m *Master) RemovePageFrom(mt Matcher, force bool, after string, limit int) RemovePage {
	if limit <= 0 || limit > RemoveChunk {
		limit = RemoveChunk
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	var victims []string
	last, more, scan := "", false, removeScan
	m.index.ascend(max(mt.Prefix, after), removeScan+limit+3, func(k string) bool {
		if k == after {
			return true
		}
		if !strings.HasPrefix(k, mt.Prefix) {
			return false
		}
		if len(victims) == limit || scan == 0 {
			more = true
			return false
		}
		scan--
		last = k
		if mt.Match(k) {
			victims = append(victims, k)
		}
		return true
	})
	page := RemovePage{}
	if more {
		page.Next = last // the next chunk starts after the last key passed
	}
	durable := map[string]bool{}
	tombs := 0
	for i, k := range victims {
		if tombs >= MaxPageTombstones {
			// A key freed often while its node could not zero the old
			// headers fast enough carries many: the chunk ends here, its
			// answer bounded, and the next goes on after the last key taken.
			page.Next = victims[i-1]
			break
		}
		o := m.objects.get(k)
		if o == nil || !o.complete { // held only on disk
			m.goneDiskLocked(k)
			page.Removed++
			continue
		}
		if !force && o.leaseUntil.after(now) {
			m.stats.LeaseRejections++
			continue
		}
		m.freeLocked(o)
		if m.disk[k] != nil {
			m.goneDiskLocked(k)
		}
		if o.hdr > 0 {
			durable[k] = true
			if e := m.tombIdx[k]; e != nil {
				tombs += len(e.at)
			}
		}
		page.Removed++
	}
	m.stats.Removes += uint64(page.Removed)
	page.Tombstones = m.tombsOfLocked(durable)
	m.shrinkLocked()
	return page
}

// RemoveByRegex removes the complete objects whose key matches the RE2
// pattern, skipping leased ones unless force, and returns how many it removed.
func (m *Master) RemoveByRegex(pattern string, force bool) (int, error) {
	n, _, err := m.RemoveByRegexHeaders(pattern, force)
	return n, err
}

// RemoveByRegexHeaders is RemoveByRegex that also returns the tombstones of
// the removed keys (see RemoveHeaders). It runs every chunk (see
// RemovePageFrom), releasing the lock between chunks.
func (m *Master) RemoveByRegexHeaders(pattern string, force bool) (int, []HeaderRef, error) {
	mt, err := RegexMatcher(pattern)
	if err != nil {
		return 0, nil, err
	}
	n, tombs := m.removeAllPages(mt, force)
	return n, tombs, nil
}

// RemoveAll removes every complete object (leased ones only if force) and
// returns how many it removed. Unfinished puts are left alone.
func (m *Master) RemoveAll(force bool) int {
	n, _ := m.RemoveAllHeaders(force)
	return n
}

// RemoveAllHeaders is RemoveAll that also returns the tombstones of the
// removed keys (see RemoveHeaders), chunk by chunk as RemoveByRegexHeaders.
func (m *Master) RemoveAllHeaders(force bool) (int, []HeaderRef) {
	return m.removeAllPages(AllMatcher, force)
}

func (m *Master) removeAllPages(mt Matcher, force bool) (int, []HeaderRef) {
	n, after := 0, ""
	var tombs []HeaderRef
	for {
		p := m.RemovePageFrom(mt, force, after, RemoveChunk)
		n += p.Removed
		tombs = append(tombs, p.Tombstones...)
		if p.Next == "" {
			return n, tombs
		}
		after = p.Next
	}
}
