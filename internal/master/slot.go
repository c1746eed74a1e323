package master

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/kvcache-go/mooncake/internal/tenant"
)

// Put slots: a put in one master round trip.
//
// A put is normally PutStart (space), the write, and PutEnd. A client may
// instead hold a slot: space reserved for its next put of a given size, key
// length and policy, allocated (with a sequence number) when its previous
// put ended. It writes header and value into the slot and one PutCommit
// makes the slot the key's object. A slot is an unfinished put of a
// placeholder key (SlotPrefix + client + sequence number) owned by the
// client, so the rules of unfinished puts hold: it is never evicted, freed
// with its owner, and freed after PutReleaseTimeout.
//
// The slot's header carries the slot's sequence number, which is older than
// any version of the key put after the reservation. A commit is refused
// (slot gone: the client puts the usual way) when the key has, or had, a
// version at least as new (an object, a removed or evicted version, an
// unzeroed tombstone, a preempted put, a disk copy), so the newest sequence
// number is always the acknowledged value, as durable metadata's restore
// assumes. A commit the key's rules refuse (it exists and this is no upsert,
// it is leased, a put of it is in progress) frees the slot and returns its
// tombstones, which the client zeroes before its put returns: the header of
// a refused put never outlives the call.

// SlotPrefix starts the placeholder keys of put slots: SlotPrefix, the
// namespace of the key whose commit asked for it (none for the raw key
// space), the client id, "/", a sequence number. A slot is committed only
// to a key of that namespace by that client (slotOf): a slot may hold
// what its tenant wrote before (a reused slot holds the version it
// replaced), so another tenant claiming the client's id must not get it.
const SlotPrefix = "\x00slot/"

// namespaceOf is the tenant namespace key lies in (a prefix of it, "" for
// the raw key space).
func namespaceOf(key string) string {
	t, _ := tenant.Split(key)
	if t == "" {
		return ""
	}
	return key[:len(tenant.Namespace(""))+len(t)] // "\x00t/" + t + "/"
}

// slotOf reports whether slot is a slot name of clientID's for a key of
// key's namespace.
func slotOf(slot, key, clientID string) bool {
	rest, ok := strings.CutPrefix(slot, SlotPrefix)
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, namespaceOf(key))
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, clientID)
	return ok && strings.HasPrefix(rest, "/")
}

// PutReserve reserves a slot for the client's next put of size bytes under
// a key of keyLen bytes of the raw key space with policy rc, and returns
// its placeholder key and replicas (their Seq and HeaderLen as PutStart's).
func (m *Master) PutReserve(clientID string, size uint64, keyLen int, rc ReplicateConfig) (string, []Replica, error) {
	return m.PutReserveIn(clientID, "", size, keyLen, rc)
}

// PutReserveIn is PutReserve for a key of namespace ns (tenant.Namespace;
// "" for the raw key space): only such a key may commit the slot.
func (m *Master) PutReserveIn(clientID, ns string, size uint64, keyLen int, rc ReplicateConfig) (string, []Replica, error) {
	if keyLen < 1 || keyLen > m.cfg.MaxKeyLen {
		return "", nil, fmt.Errorf("%w: key length %d", ErrInvalidParams, keyLen)
	}
	if rc.PromoteSeq != 0 {
		return "", nil, fmt.Errorf("%w: a promotion takes no slot", ErrInvalidParams)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.putReserveLocked(clientID, ns, size, keyLen, rc)
}

func (m *Master) putReserveLocked(clientID, ns string, size uint64, keyLen int, rc ReplicateConfig) (string, []Replica, error) {
	slot := SlotPrefix + ns + clientID + "/" + strconv.FormatUint(m.seq+1, 10)
	if err := m.validPut(slot, size, rc); err != nil {
		return "", nil, err
	}
	return m.reserveLocked(clientID, slot, size, keyLen, rc, m.clock.Now(), nil)
}

// SlotAsk is the slot a commit asks for (CommitNext): space for the
// client's next put of Size bytes under a key of KeyLen bytes.
type SlotAsk struct {
	Size   uint64
	KeyLen int
}

// Committed is the outcome of CommitNext: PutCommit's (Tombs, Gone, Err)
// and, when the commit went through and a slot was asked for and could be
// reserved, the slot (Slot, Next as PutReserve's answer; ReserveErr why
// none was).
type Committed struct {
	Tombs      []HeaderRef
	Gone       bool
	Err        error
	Slot       string
	Next       []Replica
	ReserveErr error
}

// CommitNext ends a put and reserves the client's next slot in one hold of
// the lock: PutEnd of key (slot "") or PutCommit of the slot as key, then,
// when that went through and ask.Size > 0, PutReserve of ask with policy rc.
// One hold instead of two: under load every hold of the master's one lock is
// a place where the other clients' calls queue. What needs no lock (the
// clock, the keys' hashes, the next slot's name and replica list, the
// checks of the arguments) is done before it is taken.
func (m *Master) CommitNext(clientID, key, slot string, crc uint32, rc ReplicateConfig, upsert bool, ask SlotAsk) Committed {
	var out Committed
	if slot != "" {
		if err := m.checkKey(key); err != nil {
			out.Err = err
			return out
		}
	}
	reserve := ask.Size > 0 && ask.KeyLen >= 1 && ask.KeyLen <= m.cfg.MaxKeyLen && rc.PromoteSeq == 0
	if ask.Size > 0 && !reserve {
		out.ReserveErr = fmt.Errorf("%w: slot of key length %d, promotion %d", ErrInvalidParams, ask.KeyLen, rc.PromoteSeq)
	}
	a := m.commitArgs(clientID, key, slot, crc, rc, upsert)
	if reserve {
		a.withAsk(m, ask)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.commitNextLocked(&a, &out)
	return out
}

// commitNextLocked is CommitNext's part under the lock.
func (m *Master) commitNextLocked(a *commitArgs, out *Committed) {
	if a.slot == "" {
		out.Err = m.putEndAtLocked(a.clientID, a.key, a.keyHash, a.crc, a.now)
	} else {
		out.Tombs, out.Gone, out.Err, out.Slot, out.Next = m.commitSlotLocked(a)
	}
	if a.reserve && out.Err == nil && !out.Gone && out.Slot == "" {
		out.Slot, out.Next, out.ReserveErr = m.reserveNextLocked(a)
	}
}

// commitArgs is a commit (CommitNext, PutCommit) with what it needs worked
// out before the lock is taken.
type commitArgs struct {
	clientID, key, slot string
	crc                 uint32
	rc                  ReplicateConfig
	upsert              bool
	now                 time.Time // the clock, read once
	keyHash, slotHash   uint32    // keyHash of key and slot
	keyHdr              uint64    // headerLen(key) with durable metadata, else 0

	// With a slot asked for (withAsk):
	reserve bool
	ask     SlotAsk
	askHdr  uint64    // header length of the asked slot
	name    []byte    // SlotPrefix + clientID + "/", with room for the sequence number
	reps    []Replica // room for the next slot's replicas
}

func (m *Master) commitArgs(clientID, key, slot string, crc uint32, rc ReplicateConfig, upsert bool) commitArgs {
	a := commitArgs{clientID: clientID, key: key, slot: slot, crc: crc, rc: rc, upsert: upsert,
		now: m.clock.Now(), keyHash: keyHash(key)}
	if slot != "" {
		a.slotHash = keyHash(slot)
		if m.cfg.Durable {
			a.keyHdr = headerLen(key)
		}
	}
	return a
}

// withAsk adds the slot ask to a.
func (a *commitArgs) withAsk(m *Master, ask SlotAsk) {
	a.reserve, a.ask = true, ask
	if m.cfg.Durable {
		a.askHdr = headerLenOf(ask.KeyLen)
	}
	ns := namespaceOf(a.key)
	a.name = make([]byte, 0, len(SlotPrefix)+len(ns)+len(a.clientID)+1+20)
	a.name = append(append(append(append(a.name, SlotPrefix...), ns...), a.clientID...), '/')
	a.reps = make([]Replica, max(a.rc.Replicas, 1))
}

// slotName is the placeholder key of the client's slot of sequence number
// seq, made in a.name's room (used once: the string shares its bytes).
func (a *commitArgs) slotName(seq uint64) string {
	b := strconv.AppendUint(a.name, seq, 10)
	a.name = nil
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// reserveNextLocked is putReserveLocked for a's ask.
func (m *Master) reserveNextLocked(a *commitArgs) (string, []Replica, error) {
	if a.name == nil { // cannot happen: the slot name is made once, by a reuse, which reserves nothing more
		return m.putReserveLocked(a.clientID, namespaceOf(a.key), a.ask.Size, a.ask.KeyLen, a.rc)
	}
	slot := a.slotName(m.seq + 1)
	if err := m.validPut(slot, a.ask.Size, a.rc); err != nil {
		return "", nil, err
	}
	return m.reserveLocked(a.clientID, slot, a.ask.Size, a.ask.KeyLen, a.rc, a.now, a.reps)
}

// reserveLocked reserves the slot; its replicas are listed in dst when it
// has room.
func (m *Master) reserveLocked(clientID, slot string, size uint64, keyLen int, rc ReplicateConfig, now time.Time, dst []Replica) (string, []Replica, error) {
	var hdr uint64
	if m.cfg.Durable {
		hdr = headerLenOf(keyLen)
	}
	if err := m.checkFitsLocked(hdr + size); err != nil {
		return "", nil, err
	}
	if err := m.memoryAdmitLocked(); err != nil {
		return "", nil, err
	}
	reps, err := m.placeOrEvictLocked(clientID, noOwner, hdr+size, max(rc.Replicas, 1), rc.PreferredSegments, now)
	if err != nil {
		return "", nil, err
	}
	m.seq++
	o := m.objects.add(slot, object{size: size, created: nanoOf(now), lastAccess: nanoOf(now), hdr: uint32(hdr), seq: m.seq})
	m.objects.setOwner(o, clientID)
	o.pin(rc, m.cfg.SoftPinTTL, now)
	m.placeReplicasLocked(o, reps)
	m.addPendingLocked(o, slot)
	return slot, m.descriptorsInto(dst, o), nil
}

// PutCommit makes the slot the client wrote key's value into the key's
// object, with the value's CRC32C and policy rc (upsert replaces a current
// value). gone reports a slot that cannot take the put (unknown, not the
// client's, sized for another key length, or older than a version of the
// key): nothing was committed and the client puts the usual way. On gone
// and on the key's refusals (ErrObjectExists, ErrObjectHasLease) the slot is
// freed and tombs lists the headers the client must zero.
func (m *Master) PutCommit(clientID, key, slot string, crc uint32, rc ReplicateConfig, upsert bool) (tombs []HeaderRef, gone bool, err error) {
	if err := m.checkKey(key); err != nil {
		return nil, false, err
	}
	a := m.commitArgs(clientID, key, slot, crc, rc, upsert)
	m.mu.Lock()
	defer m.mu.Unlock()
	tombs, gone, err, _, _ = m.commitSlotLocked(&a)
	return tombs, gone, err
}

// commitSlotLocked is PutCommit of a; with a slot asked for (a.reserve),
// when the commit replaces a version that can be the client's next slot
// (reusableLocked), that version's space becomes the slot asked for (next
// and its replicas).
func (m *Master) commitSlotLocked(a *commitArgs) (tombs []HeaderRef, gone bool, err error, next string, nextReps []Replica) {
	key, slot, now := a.key, a.slot, a.now
	if !slotOf(slot, key, a.clientID) {
		return nil, true, nil, "", nil
	}
	s := m.objects.getHashed(slot, a.slotHash)
	if s == nil || s.complete || m.ownerID(s) != a.clientID || s.nrep == 0 { // a slot is an unfinished put
		return nil, true, nil, "", nil
	}
	refuse := func(gone bool, err error) ([]HeaderRef, bool, error, string, []Replica) {
		m.freeLocked(s)
		return m.tombsOfLocked(map[string]bool{slot: true}), gone, err, "", nil
	}
	if p, ok := m.priors[s.id]; ok && p.revoked {
		return refuse(true, nil) // its older header was named for zeroing: its own may be zeroed too
	}
	prev := m.objects.getHashed(key, a.keyHash)
	if (m.cfg.Durable && s.header() != a.keyHdr) || m.newerLocked(key, prev, s.seq) {
		return refuse(true, nil)
	}
	if err := m.tenantAdmitLocked(key, s.size*uint64(s.nrep), prev); err != nil {
		return refuse(false, err)
	}
	handed, reused := false, false
	if o := prev; o != nil {
		switch {
		case !o.complete && now.Sub(o.created.time()) < m.cfg.PutTimeout:
			return refuse(false, fmt.Errorf("%w: put in progress for %q", ErrObjectExists, key))
		case !o.complete:
			return refuse(true, nil) // a zombie: the usual put preempts it
		case !a.upsert:
			return refuse(false, fmt.Errorf("%w: %q", ErrObjectExists, key))
		}
		// o, key's visible version, is replaced in this hold: the slot takes
		// its place in the listing index at once (goneLocked leaves the index
		// alone while replacing), and no older header of key is revoked.
		m.handOverIndexLocked(o, s)
		handed, m.replacing = true, true
		switch {
		case o.leaseUntil.after(now):
			m.retireLeasedLocked(o, now) // readers keep the old value until their lease ends
		case a.reserve && m.reusableLocked(o, key, s.id, a.ask, a.askHdr, a.rc):
			next, nextReps = m.reuseAsSlotLocked(o, s, a) // s takes the key
			reused = true
		default:
			m.freeLocked(o) // the older version
		}
		m.replacing = false
	}
	m.confirmPriorLocked(s.id) // the client wrote the slot's header over any older one
	m.dropPendingLocked(s, slot)
	if !reused {
		m.objects.rekeyHashed(s, a.slotHash, key, a.keyHash)
	}
	s.complete, s.crc, s.created = true, a.crc, nanoOf(now)
	s.touch(now)
	s.pin(a.rc, m.cfg.SoftPinTTL, now)
	m.stats.PutStarts++
	m.stats.Puts++
	m.dropDiskLocked(key, true)
	if handed {
		m.countAtLocked(s, 1, now)
		m.emitStored(key)
	} else {
		m.storedAtLocked(s, key, now)
	}
	return nil, false, nil, next, nextReps
}

// newerLocked reports whether key, whose object (nil: none) the caller
// looked up, has, or had, a version with a sequence number of at least seq
// that could still be restored: an object or unfinished put, a removed or
// evicted version the master remembers, an unzeroed tombstone, a preempted
// put's space, or a disk copy.
func (m *Master) newerLocked(key string, o *object, seq uint64) bool {
	if o != nil && o.seq >= seq {
		return true
	}
	if m.removed[key] >= seq || m.evicted[key] >= seq || m.tombSeqLocked(key) >= seq {
		return true
	}
	if d := m.disk[key]; d != nil && d.seq >= seq {
		return true
	}
	for _, z := range m.zombies {
		if z.key == key && z.seq >= seq {
			return true
		}
	}
	return false
}
