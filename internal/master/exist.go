package master

// existHold is how many keys one hold of the lock probes in BatchExist: a
// batch of any size holds the lock for at most this many table probes at
// a time, so that pings and other calls wait behind at most one slice.
const existHold = 8192

// BatchExist reports, in order, whether each key names a complete object
// (in memory or on a disk tier), as Exist does; an invalid key reports
// false. It refreshes the recency of the objects found; block keys of the
// store connector's scheme form one recency group (TouchChains).
//
// The work that needs no lock (checking and hashing the keys, finding
// their chains, the answer) is done before the lock is taken; under it
// only the table is probed, existHold keys per hold. Each key's answer is
// exact as of its slice's hold.
func (m *Master) BatchExist(keys []string) []bool {
	out := make([]bool, len(keys))
	if len(keys) == 0 {
		return out
	}
	// idx are the positions of the valid keys, hs their hashes; chains
	// (when some key is a block key) the chain of each valid key ("" for
	// a key of no chain).
	idx := make([]int32, 0, len(keys))
	hs := make([]uint32, 0, len(keys))
	var chains []string
	for i, k := range keys {
		if m.checkKey(k) != nil {
			continue
		}
		if c, ok := ChainOf(k); ok {
			if chains == nil {
				chains = make([]string, len(idx), len(keys))
			}
			chains = append(chains, c)
		} else if chains != nil {
			chains = append(chains, "")
		}
		idx = append(idx, int32(i))
		hs = append(hs, keyHash(k))
	}
	var depth map[string]int // of each chain, over the whole batch
	if chains != nil {
		depth = map[string]int{}
	}
	for lo := 0; lo < len(idx); lo += existHold {
		hi := min(lo+existHold, len(idx))
		var cs []string
		if chains != nil {
			cs = chains[lo:hi]
		}
		m.existSlice(keys, idx[lo:hi], hs[lo:hi], cs, depth, out)
	}
	return out
}

// existSlice answers the valid keys at positions idx (hashes hs, chains
// cs or nil) into out under one hold of the lock.
func (m *Master) existSlice(keys []string, idx []int32, hs []uint32, cs []string, depth map[string]int, out []bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	disk := len(m.disk) > 0
	for j, i := range idx {
		if j%touchGroup == 0 { // the next group's slots, read together while they stay cached
			m.objects.touch(hs[j:min(len(hs), j+touchGroup)])
		}
		k := keys[i]
		if o := m.objects.getHashed(k, hs[j]); o != nil && o.complete {
			o.touch(now)
			if cs != nil && cs[j] != "" {
				chainTouch(o, depth, cs[j])
			}
			out[i] = true
		} else if disk {
			_, out[i] = m.diskInfoLocked(k)
		}
	}
}

// chainTouch records o, just touched, as the next block of chain in a
// batch whose chains have the depths depth (as touchChainsLocked does).
func chainTouch(o *object, depth map[string]int, chain string) {
	o.chained, o.depth = true, uint16(min(depth[chain], 1<<16-1))
	depth[chain]++
}
