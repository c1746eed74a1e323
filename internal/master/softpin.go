package master

import "time"

// Soft-pin actions (Mooncake's SoftPinAction) on an upsert: ENABLE
// (ReplicateConfig.SoftPin) pins the new value for SoftPinTTL, DISABLE
// (neither flag) leaves it unpinned, PRESERVE (KeepSoftPin) keeps the soft
// pin the key's committed value had, if it has not expired. A new key has
// nothing to preserve.

// committedSoftPinLocked is the soft-pin deadline of key's complete value
// (zero when there is none).
func (m *Master) committedSoftPinLocked(key string) time.Time {
	if o := m.objects.get(key); o != nil && o.complete {
		return o.softPinUntil.time()
	}
	return time.Time{}
}

// keepSoftPinLocked applies PRESERVE after an upsert: the key's value (now
// the upsert in progress) gets back the deadline prev of the value it
// replaces.
func (m *Master) keepSoftPinLocked(key string, rc ReplicateConfig, prev, now time.Time) {
	if !rc.KeepSoftPin || rc.SoftPin || !prev.After(now) {
		return
	}
	if o := m.objects.get(key); o != nil && !o.complete {
		o.softPinUntil = nanoOf(prev)
	}
}
