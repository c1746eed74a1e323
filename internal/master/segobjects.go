package master

// Each segment lists the objects with a replica on it (segment.objects),
// which unmounting it walks: O(its objects), whatever the number of objects
// elsewhere. The list is a slice of record IDs in no particular order, and
// each replica keeps the index of its object in its segment's list
// (replica.at), so that adding and dropping are O(1) (a drop moves the last
// entry into the hole). Per replica that is 4 bytes in the list and 4 in the
// replica, and no pointer.

// segAdd puts o, which has a replica on s, in s's list.
func (m *Master) segAdd(s *segment, o *object) {
	r := m.replicaOn(o, s)
	r.at = uint32(len(s.objects))
	s.objects = append(s.objects, o.id)
}

// segDrop takes o, whose replica on s is still in its replicas, out of s's
// list.
func (m *Master) segDrop(s *segment, o *object) {
	at, last := m.replicaOn(o, s).at, uint32(len(s.objects)-1)
	if at != last {
		moved := s.objects[last]
		s.objects[at] = moved
		m.replicaOn(m.objects.at(moved), s).at = at
	}
	s.objects = s.objects[:last]
}

// replicaOn is o's replica on s (an object has at most one per segment);
// it panics when there is none.
func (m *Master) replicaOn(o *object, s *segment) *replica {
	rs := m.reps(o)
	for i := range rs {
		if rs[i].seg == s.id {
			return &rs[i]
		}
	}
	panic("master: object " + m.keyOf(o) + " has no replica on segment " + s.key)
}
