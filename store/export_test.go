package store

// FastConnected reports whether the client's fastrpc connection to the
// master is up (tests).
func FastConnected(c *Client) bool {
	c.fast.mu.Lock()
	defer c.fast.mu.Unlock()
	return c.fast.conn != nil && c.fast.conn.Err() == nil
}
