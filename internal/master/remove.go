package master

import (
	"fmt"
	"regexp"
)

// Remove deletes a complete object. A leased object is refused with
// ErrObjectHasLease unless force; force also removes an unfinished put.
func (m *Master) Remove(key string, force bool) error {
	if err := m.checkKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects[key]
	if o == nil || (!o.complete && !force) {
		return fmt.Errorf("%w: %q", ErrObjectNotFound, key)
	}
	if !force && m.clock.Now().Before(o.leaseUntil) {
		m.stats.LeaseRejections++
		return fmt.Errorf("%w: %q", ErrObjectHasLease, key)
	}
	m.freeLocked(o)
	m.stats.Removes++
	return nil
}

// RemoveByRegex removes the complete objects whose key matches the RE2
// pattern, skipping leased ones unless force, and returns how many it removed.
func (m *Master) RemoveByRegex(pattern string, force bool) (int, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, fmt.Errorf("%w: bad regex: %v", ErrInvalidParams, err)
	}
	return m.removeWhere(func(k string) bool { return re.MatchString(k) }, force), nil
}

// RemoveAll removes every complete object (leased ones only if force) and
// returns how many it removed. Unfinished puts are left alone.
func (m *Master) RemoveAll(force bool) int {
	return m.removeWhere(func(string) bool { return true }, force)
}

func (m *Master) removeWhere(match func(string) bool, force bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	n := 0
	for k, o := range m.objects {
		if !o.complete || !match(k) {
			continue
		}
		if !force && now.Before(o.leaseUntil) {
			m.stats.LeaseRejections++
			continue
		}
		m.freeLocked(o)
		n++
	}
	m.stats.Removes += uint64(n)
	return n
}
