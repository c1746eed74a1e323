package disktier

import (
	"sync"

	"golang.org/x/sys/unix"
)

// fdCache keeps the read descriptors of recently read files open (up to
// fdCacheMax), so the slices of a value, read one by one by the lanes and
// ahead of them, cost one pread each rather than open, pread and close. A
// file is never rewritten in place (a new version is a new file), so a
// cached descriptor always reads the bytes its name was written with;
// drop closes it when the tier forgets the file.
type fdCache struct {
	mu   sync.Mutex
	m    map[string]*cachedFD
	tick uint64
}

const fdCacheMax = 256

type cachedFD struct {
	name string
	fd   int
	refs int
	used uint64
	dead bool // dropped: closed when the last user is done
}

// get returns an open descriptor of name (open with open when not
// cached); release it with put.
func (c *fdCache) get(name string, open func() (int, error)) (*cachedFD, error) {
	c.mu.Lock()
	c.tick++
	if f := c.m[name]; f != nil {
		f.refs++
		f.used = c.tick
		c.mu.Unlock()
		return f, nil
	}
	c.mu.Unlock()
	fd, err := open()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.m[name]; f != nil { // opened meanwhile by another reader
		unix.Close(fd)
		f.refs++
		return f, nil
	}
	if c.m == nil {
		c.m = map[string]*cachedFD{}
	}
	if len(c.m) >= fdCacheMax {
		var old *cachedFD
		for _, f := range c.m {
			if f.refs == 0 && (old == nil || f.used < old.used) {
				old = f
			}
		}
		if old == nil { // every one in use: this one is not cached
			return &cachedFD{name: name, fd: fd, refs: 1, dead: true}, nil
		}
		delete(c.m, old.name)
		unix.Close(old.fd)
	}
	f := &cachedFD{name: name, fd: fd, refs: 1, used: c.tick}
	c.m[name] = f
	return f, nil
}

// put ends a use of f.
func (c *fdCache) put(f *cachedFD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f.refs--
	if f.refs == 0 && f.dead {
		unix.Close(f.fd)
	}
}

// drop forgets name's descriptor (closed once its users are done).
func (c *fdCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.m[name]
	if f == nil {
		return
	}
	delete(c.m, name)
	f.dead = true
	if f.refs == 0 {
		unix.Close(f.fd)
	}
}

// close closes every idle descriptor (the tier's Close).
func (c *fdCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, f := range c.m {
		delete(c.m, name)
		f.dead = true
		if f.refs == 0 {
			unix.Close(f.fd)
		}
	}
}
