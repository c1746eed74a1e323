package master

import (
	"fmt"
	"regexp"
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
	o := m.objects[key]
	if (o == nil || !o.complete) && m.disk[key] != nil {
		m.goneDiskLocked(key)
		m.stats.Removes++
		return nil, nil
	}
	if o == nil || (!o.complete && !force) {
		return nil, fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	if !force && m.clock.Now().Before(o.leaseUntil) {
		m.stats.LeaseRejections++
		return nil, fmt.Errorf("%w: %q", ErrObjectHasLease, key)
	}
	m.freeLocked(o)
	m.stats.Removes++
	return m.tombsOfLocked(map[string]bool{key: true}), nil
}

// RemoveByRegex removes the complete objects whose key matches the RE2
// pattern, skipping leased ones unless force, and returns how many it removed.
func (m *Master) RemoveByRegex(pattern string, force bool) (int, error) {
	n, _, err := m.RemoveByRegexHeaders(pattern, force)
	return n, err
}

// RemoveByRegexHeaders is RemoveByRegex that also returns the tombstones of
// the removed keys (see RemoveHeaders).
func (m *Master) RemoveByRegexHeaders(pattern string, force bool) (int, []HeaderRef, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: bad regex: %v", ErrInvalidParams, err)
	}
	n, tombs := m.removeWhere(func(k string) bool { return re.MatchString(k) }, force)
	return n, tombs, nil
}

// RemoveAll removes every complete object (leased ones only if force) and
// returns how many it removed. Unfinished puts are left alone.
func (m *Master) RemoveAll(force bool) int {
	n, _ := m.RemoveAllHeaders(force)
	return n
}

// RemoveAllHeaders is RemoveAll that also returns the tombstones of the
// removed keys (see RemoveHeaders).
func (m *Master) RemoveAllHeaders(force bool) (int, []HeaderRef) {
	return m.removeWhere(func(string) bool { return true }, force)
}

func (m *Master) removeWhere(match func(string) bool, force bool) (int, []HeaderRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	n := 0
	keys := map[string]bool{}
	for k, o := range m.objects {
		if !o.complete || !match(k) {
			continue
		}
		if !force && now.Before(o.leaseUntil) {
			m.stats.LeaseRejections++
			continue
		}
		m.freeLocked(o)
		if o.hdr > 0 {
			keys[k] = true
		}
		n++
	}
	for k := range m.disk {
		if match(k) && m.objects[k] == nil {
			m.goneDiskLocked(k)
			n++
		}
	}
	m.stats.Removes += uint64(n)
	return n, m.tombsOfLocked(keys)
}
