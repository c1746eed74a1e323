package store

import pb "github.com/kvcache-go/mooncake/internal/storepb"

// FastConnected reports whether the client's fastrpc connection to the
// master is up (tests).
func FastConnected(c *Client) bool {
	c.fast.mu.Lock()
	defer c.fast.mu.Unlock()
	return c.fast.conn != nil && c.fast.conn.Err() == nil
}

// SlotKeys lists the put slots the client holds (tests).
func SlotKeys(c *Client) []string {
	c.slotMu.Lock()
	defer c.slotMu.Unlock()
	var out []string
	for _, s := range c.slots {
		out = append(out, s.key)
	}
	return out
}

// SameFastConn reports whether two clients use one fastrpc connection.
func SameFastConn(a, b *Client) bool {
	a.fast.mu.Lock()
	ca := a.fast.conn
	a.fast.mu.Unlock()
	b.fast.mu.Lock()
	defer b.fast.mu.Unlock()
	return ca != nil && ca == b.fast.conn
}

// FastConn is the client's fastrpc connection, as an opaque identity (tests).
func FastConn(c *Client) any {
	c.fast.mu.Lock()
	defer c.fast.mu.Unlock()
	return c.fast.conn
}

// LastRemount is what the client's last successful remount after
// NEED_REMOUNT sent: calls, largest and total request bytes (tests).
func LastRemount(c *Client) (calls, maxBytes, totalBytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.remountSt.last
	return st.calls, st.maxBytes, st.bytes
}

// RemountChunkBytes is the bound on one remount message's reports.
const RemountChunkBytes = remountChunkBytes

// SlotMaxAge is how long a client uses a put slot.
const SlotMaxAge = slotMaxAge

// SetBeforeZero makes the client call f before it zeroes the headers a
// remove or put answer named (tests): f may hold the write back.
func SetBeforeZero(c *Client, f func(addrs []uint64)) {
	c.beforeZero = func(refs []*pb.HeaderRef) {
		addrs := make([]uint64, len(refs))
		for i, r := range refs {
			addrs[i] = r.Addr
		}
		f(addrs)
	}
}
