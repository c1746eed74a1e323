package master

import "time"

// The disk tier (Mooncake's root_fs_dir / SSD offload). A storage node with
// a disk directory mounts its segment with a DiskURL. When the watermark
// eviction (Tick) frees a durable object on such a segment with
// OffloadOnEvict, the whole object stays allocated as an offload tombstone;
// the node copies it (header and value, CRC-checked) to disk, zeroes the
// header and reports both in its next ping: the space is freed and the
// master records the disk copy (DiskSync). A put that needs room at once
// (synchronous eviction) frees without offloading. A key whose only copy is
// on disk is readable: GetReplicaList returns its disk copy (the address
// the node's engine serves it at, HeldObject.Offset of its reports, and
// the node's HTTP URL), and, with PromotionOnHit, asks the reader to put it back
// into memory. A newer put, a remove or the loss of the segment drops the
// copy and the node is told to delete it. A restarted node with its disk
// reports the copies when it mounts (Restore with HeldObject.Disk).

type diskCopy struct {
	seg          *segment
	seq, size    uint64
	crc          uint32
	hardPin      bool
	softPinUntil time.Time
	addr         uint64 // where the node's engine serves the value (HeldObject.Offset); 0 = HTTP only
}

func (d *diskCopy) ref() DiskCopy {
	return DiskCopy{Segment: d.seg.spec.Name, URL: d.seg.spec.DiskURL, Seq: d.seq, Endpoint: d.seg.spec.Endpoint, Addr: d.addr}
}

// DiskSync records what a client's disk tiers took (offloaded or found at
// start) and dropped (capacity), and returns the disk copies it must
// delete.
func (m *Master) DiskSync(clientID string, onDisk, dropped []HeldObject) []HeldObject {
	m.mu.Lock()
	defer m.mu.Unlock()
	rm, _ := m.diskSyncLocked(m.clients[clientID], onDisk, dropped)
	return rm
}

func (m *Master) diskSyncLocked(c *client, onDisk, dropped []HeldObject) (remove []HeldObject, taken int) {
	if c == nil {
		return nil, 0
	}
	now := m.clock.Now()
	for _, h := range dropped {
		if d := m.disk[h.Key]; d != nil && d.seg.spec.Name == h.Segment && d.seg.client == c.id && d.seq == h.Seq {
			m.dropDiskLocked(h.Key, false)
		}
	}
	for _, h := range onDisk {
		s := c.segments[h.Segment]
		if s == nil || s.spec.DiskURL == "" {
			continue
		}
		m.seq = max(m.seq, h.Seq)
		o, d := m.objects.get(h.Key), m.disk[h.Key]
		switch {
		case d != nil && d.seg == s && d.seq == h.Seq:
			d.addr = h.Offset // known (a reopened tier gives it a new address)
			continue
		case d != nil && d.seq == h.Seq:
			d.addr = h.Offset
			d.seg.diskObjects--
			d.seg.diskBytes -= d.size
			d.seg = s // the same version, reported by a node restarted under a new name
			s.diskObjects++
			s.diskBytes += d.size
			taken++
			continue
		case o != nil && o.seq >= h.Seq, m.removed[h.Key] >= h.Seq, d != nil && d.seq >= h.Seq:
			s.diskRemove = append(s.diskRemove, h) // a newer version exists, or it was removed
			continue
		}
		if d != nil {
			m.dropDiskLocked(h.Key, true)
		}
		d = &diskCopy{seg: s, seq: h.Seq, size: h.Size, crc: h.CRC, hardPin: h.HardPin, addr: h.Offset}
		if h.SoftPin {
			d.softPinUntil = now.Add(max(h.SoftPinTTL, m.cfg.SoftPinTTL))
		}
		m.disk[h.Key] = d
		s.diskObjects++
		s.diskBytes += d.size
		m.indexAddLocked(h.Key)
		taken++
		if m.cfg.Events != nil {
			m.cfg.Events.Stored(h.Key, TierDisk)
		}
	}
	for _, s := range c.segments {
		remove = append(remove, s.diskRemove...)
		s.diskRemove = nil
	}
	return remove, taken
}

// dropDiskLocked forgets the disk copy of key; tell asks its node to
// delete it.
func (m *Master) dropDiskLocked(key string, tell bool) {
	d := m.disk[key]
	if d == nil {
		return
	}
	delete(m.disk, key)
	d.seg.diskObjects--
	d.seg.diskBytes -= d.size
	m.indexDropLocked(key)
	if tell {
		d.seg.diskRemove = append(d.seg.diskRemove, HeldObject{Segment: d.seg.spec.Name, Key: key, Seq: d.seq, Size: d.size, Disk: true})
	}
	if m.cfg.Events != nil {
		m.cfg.Events.Removed(key, TierDisk)
	}
}

// diskInfoLocked is the ObjectInfo of a key held only on disk.
func (m *Master) diskInfoLocked(key string) (ObjectInfo, bool) {
	d := m.disk[key]
	if d == nil || m.segments[d.seg.key] != d.seg {
		return ObjectInfo{}, false
	}
	return ObjectInfo{Key: key, Size: d.size, CRC: d.crc, Complete: true, Disk: []DiskCopy{d.ref()},
		Promote: d.seg.spec.PromotionOnHit, HardPin: d.hardPin, SoftPinUntil: d.softPinUntil, View: m.viewVersion, Seq: d.seq}, true
}

// dropSegmentDiskLocked forgets the disk copies on an unmounted segment.
func (m *Master) dropSegmentDiskLocked(s *segment) {
	if len(m.disk) == 0 {
		return
	}
	for k, d := range m.disk {
		if d.seg == s {
			m.dropDiskLocked(k, false)
		}
	}
}

// goneDiskLocked removes a key's disk copy as a remove does: the node is
// told to delete it and, during the restore window, the version is
// remembered so a late report cannot bring it back.
func (m *Master) goneDiskLocked(key string) {
	if d := m.disk[key]; d != nil && m.clock.Now().Sub(m.started) < m.cfg.RestoreWindow {
		m.removed[key] = max(m.removed[key], d.seq)
	}
	m.dropDiskLocked(key, true)
}
