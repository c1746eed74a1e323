package store

import "unsafe"

// grantString is b (a grant of a decoded master reply) as a string without
// a copy: the bytes of a decoded reply are never written again. A transfer
// lane tells grants apart by their bytes, so a grant the master hands out
// again is sent once per lane while the node keeps it.
func grantString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
