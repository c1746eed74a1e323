package master

// Each segment lists the objects with a replica on it (segment.objects),
// which unmounting it walks: O(its objects), whatever the number of objects
// elsewhere. The list is a slice in no particular order, and each replica
// keeps the index of its object in its segment's list (replica.at), so that
// adding and dropping are O(1) (a drop moves the last entry into the hole).
// Per replica that is 8 bytes in the list and 8 in the replica, where a set
// of keys (map[string]struct{}) took about 53.

// add puts o, which has a replica on s, in s's list.
func (s *segment) add(o *object) {
	r := o.replicaOn(s)
	r.at = len(s.objects)
	s.objects = append(s.objects, o)
}

// drop takes o, whose replica on s is still in o.replicas, out of s's list.
func (s *segment) drop(o *object) {
	at, last := o.replicaOn(s).at, len(s.objects)-1
	if at != last {
		moved := s.objects[last]
		s.objects[at] = moved
		moved.replicaOn(s).at = at
	}
	s.objects[last] = nil
	s.objects = s.objects[:last]
}

// replicaOn is o's replica on s (an object has at most one per segment);
// it panics when there is none.
func (o *object) replicaOn(s *segment) *replica {
	for i := range o.replicas {
		if o.replicas[i].seg == s {
			return &o.replicas[i]
		}
	}
	panic("master: object " + o.key + " has no replica on segment " + s.key)
}
