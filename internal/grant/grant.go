package grant

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a grant allows on its extent.
type Mode uint8

// Modes; a grant may carry both.
const (
	Read  Mode = 1
	Write Mode = 2
)

// FlagOneShot marks a grant valid only while its issuer holds it live.
const FlagOneShot uint8 = 1

// Encoding limits.
const (
	version    = 1
	macLen     = sha256.Size
	fixedLen   = 1 + 1 + 1 + 4 + 8*5 + 1 + 1
	MaxSegment = 255
	MaxTenant  = 255
	// MaxExtents bounds the extents of one grant beyond the first.
	MaxExtents = 1024
	// MaxEncoded bounds an encoded grant.
	MaxEncoded = fixedLen + MaxSegment + MaxTenant + 2 + 16*MaxExtents + macLen
)

// Errors; test with errors.Is.
var (
	ErrMalformed    = errors.New("grant: malformed")
	ErrUnknownKey   = errors.New("grant: unknown key id")
	ErrBadMAC       = errors.New("grant: signature does not verify")
	ErrExpired      = errors.New("grant: expired")
	ErrWrongSegment = errors.New("grant: issued for another segment")
	ErrRevoked      = errors.New("grant: one-shot grant no longer live")
	// ErrDenied: no valid grant covers the requested extent and mode.
	ErrDenied = errors.New("grant: no grant covers the extent")
)

// Grant is one capability: Mode on [Addr, Addr+Length) of Segment until
// Expires.
type Grant struct {
	KeyID   uint32
	Segment string // the transfer engine's segment name ("host:port")
	Addr    uint64 // the extent, as addresses on the wire
	Length  uint64
	Mode    Mode
	Flags   uint8
	Expires time.Time
	Tenant  string
	Lease   uint64 // request or lease id, for the issuer's bookkeeping
	Nonce   uint64 // random, unique per grant
	// Extents are more extents the grant covers, beyond [Addr,
	// Addr+Length): sorted by address, not overlapping (the KV blocks of
	// one P/D request are one grant).
	Extents []Extent
}

// Extent is [Addr, Addr+Length).
type Extent struct{ Addr, Length uint64 }

func (x Extent) covers(addr, end uint64) bool { return addr >= x.Addr && end <= x.Addr+x.Length }

// Covers reports whether g allows mode on [addr, addr+n) (inside one of
// its extents).
func (g *Grant) Covers(mode Mode, addr, n uint64) bool {
	end := addr + n
	if g.Mode&mode != mode || n == 0 || end < addr {
		return false
	}
	if (Extent{g.Addr, g.Length}).covers(addr, end) {
		return true
	}
	// The last extent starting at or before addr.
	i := sort.Search(len(g.Extents), func(i int) bool { return g.Extents[i].Addr > addr })
	return i > 0 && g.Extents[i-1].covers(addr, end)
}

// ExtentsOf sorts extents, merges those that touch or overlap and drops
// empty ones: the form Grant.Extents takes.
func ExtentsOf(xs []Extent) []Extent {
	xs = slices.DeleteFunc(slices.Clone(xs), func(x Extent) bool { return x.Length == 0 })
	slices.SortFunc(xs, func(a, b Extent) int { return cmp.Compare(a.Addr, b.Addr) })
	out := xs[:0]
	for _, x := range xs {
		if k := len(out) - 1; k >= 0 && x.Addr <= out[k].Addr+out[k].Length {
			out[k].Length = max(out[k].Addr+out[k].Length, x.Addr+x.Length) - out[k].Addr
			continue
		}
		out = append(out, x)
	}
	return out
}

// Keyring holds the shared keys by id. Safe for concurrent use; read-only
// after construction.
type Keyring struct {
	keys    map[uint32][]byte
	macs    map[uint32]*sync.Pool // of HMAC states per key (hmac.New costs more than the MAC of a grant)
	checks  map[uint32]*sync.Pool // of *macState per key, for verifying
	current uint32
	// nonces: a random base plus a counter, unique for this keyring
	// without a call into the kernel per grant.
	nonceBase uint64
	nonceSeq  atomic.Uint64
}

// nonce returns a fresh non-zero nonce.
func (k *Keyring) nonce() uint64 {
	for {
		if n := k.nonceBase + k.nonceSeq.Add(1); n != 0 {
			return n
		}
	}
}

// mac appends HMAC-SHA256(key id, msg) to dst; ok is false for an unknown id.
func (k *Keyring) mac(dst []byte, id uint32, msg []byte) ([]byte, bool) {
	p, ok := k.macs[id]
	if !ok {
		return dst, false
	}
	h := p.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	dst = h.Sum(dst)
	p.Put(h)
	return dst, true
}

// macState is a pooled HMAC state with room for a sum (so checking a MAC
// allocates nothing).
type macState struct {
	h   hash.Hash
	sum [macLen]byte
}

// check reports whether key id is known and HMAC-SHA256(id, msg) equals
// want, in constant time.
func (k *Keyring) check(id uint32, msg, want []byte) (known, equal bool) {
	p, ok := k.checks[id]
	if !ok {
		return false, false
	}
	s := p.Get().(*macState)
	equal = s.equal(msg, want)
	p.Put(s)
	return true, equal
}

// checkState returns a MAC state of key id of its caller's own (nil for
// an unknown id): a Set keeps one, which its connection's goroutine uses
// without the pool.
func (k *Keyring) checkState(id uint32) *macState {
	p, ok := k.checks[id]
	if !ok {
		return nil
	}
	return p.New().(*macState)
}

// equal reports whether the MAC of msg equals want, in constant time.
func (s *macState) equal(msg, want []byte) bool {
	s.h.Reset()
	s.h.Write(msg)
	return hmac.Equal(s.h.Sum(s.sum[:0]), want)
}

// NewKeyring returns a keyring of keys (id -> key, each at least 16 bytes).
// The highest id signs.
func NewKeyring(keys map[uint32][]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("grant: no keys")
	}
	k := &Keyring{keys: map[uint32][]byte{}, macs: map[uint32]*sync.Pool{}, checks: map[uint32]*sync.Pool{}}
	var r [8]byte
	_, _ = rand.Read(r[:])
	k.nonceBase = binary.BigEndian.Uint64(r[:])
	first := true
	for id, b := range keys {
		if len(b) < 16 {
			return nil, fmt.Errorf("grant: key %d is %d bytes, want >= 16", id, len(b))
		}
		key := bytes.Clone(b)
		k.keys[id] = key
		k.macs[id] = &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}
		k.checks[id] = &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, key)} }}
		if first || id > k.current {
			k.current, first = id, false
		}
	}
	return k, nil
}

// ParseKeys reads a key file: one key a line, "ID:HEX" (at least 16 bytes
// of key); blank lines and lines starting with # are ignored.
func ParseKeys(b []byte) (*Keyring, error) {
	keys := map[uint32][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ids, hx, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("grant: key file line %d: want ID:HEX", n)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(ids), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("grant: key file line %d: id: %w", n, err)
		}
		key, err := hex.DecodeString(strings.TrimSpace(hx))
		if err != nil {
			return nil, fmt.Errorf("grant: key file line %d: key: %w", n, err)
		}
		if _, dup := keys[uint32(id)]; dup {
			return nil, fmt.Errorf("grant: key file line %d: key id %d twice", n, id)
		}
		keys[uint32(id)] = key
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return NewKeyring(keys)
}

// NewKeyHex returns a fresh random 32-byte key in hex, for a key file.
func NewKeyHex() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Encode signs g with the keyring's current key (setting g.KeyID, and a
// random Nonce when zero) and returns its encoding.
func (k *Keyring) Encode(g Grant) ([]byte, error) {
	if len(g.Segment) > MaxSegment || len(g.Tenant) > MaxTenant || len(g.Extents) > MaxExtents {
		return nil, fmt.Errorf("%w: segment or tenant name too long, or too many extents", ErrMalformed)
	}
	if err := checkExtents(g); err != nil {
		return nil, err
	}
	g.KeyID = k.current
	if g.Nonce == 0 {
		g.Nonce = k.nonce()
	}
	return k.sign(g), nil
}

// sign encodes g and appends its MAC under key g.KeyID (which must exist).
func (k *Keyring) sign(g Grant) []byte {
	b := make([]byte, 0, fixedLen+len(g.Segment)+len(g.Tenant)+2+16*len(g.Extents)+macLen)
	b = append(b, version, byte(g.Mode), g.Flags)
	b = binary.BigEndian.AppendUint32(b, g.KeyID)
	b = binary.BigEndian.AppendUint64(b, g.Addr)
	b = binary.BigEndian.AppendUint64(b, g.Length)
	b = binary.BigEndian.AppendUint64(b, uint64(g.Expires.UnixNano()))
	b = binary.BigEndian.AppendUint64(b, g.Lease)
	b = binary.BigEndian.AppendUint64(b, g.Nonce)
	b = append(b, byte(len(g.Segment)))
	b = append(b, g.Segment...)
	b = append(b, byte(len(g.Tenant)))
	b = append(b, g.Tenant...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(g.Extents)))
	for _, x := range g.Extents {
		b = binary.BigEndian.AppendUint64(b, x.Addr)
		b = binary.BigEndian.AppendUint64(b, x.Length)
	}
	b, _ = k.mac(b, g.KeyID, b)
	return b
}

// Decode parses an encoded grant without checking its signature: the
// fields of a grant that has not been verified must not be trusted. It
// returns the grant and the length of the signed part.
func Decode(b []byte) (Grant, int, error) { return decode(b, "") }

// decode is Decode; a segment name equal to segment takes that string
// instead of a new one (the verifier's common case: no allocation).
func decode(b []byte, segment string) (Grant, int, error) {
	var g Grant
	if len(b) < fixedLen+macLen || len(b) > MaxEncoded {
		return g, 0, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	if b[0] != version {
		return g, 0, fmt.Errorf("%w: version %d", ErrMalformed, b[0])
	}
	g.Mode, g.Flags = Mode(b[1]), b[2]
	if g.Mode == 0 || g.Mode&^(Read|Write) != 0 || g.Flags&^FlagOneShot != 0 {
		return g, 0, fmt.Errorf("%w: mode %d flags %d", ErrMalformed, b[1], b[2])
	}
	g.KeyID = binary.BigEndian.Uint32(b[3:])
	g.Addr = binary.BigEndian.Uint64(b[7:])
	g.Length = binary.BigEndian.Uint64(b[15:])
	g.Expires = time.Unix(0, int64(binary.BigEndian.Uint64(b[23:])))
	g.Lease = binary.BigEndian.Uint64(b[31:])
	g.Nonce = binary.BigEndian.Uint64(b[39:])
	if g.Length == 0 || g.Addr+g.Length < g.Addr {
		return g, 0, fmt.Errorf("%w: extent %#x+%d", ErrMalformed, g.Addr, g.Length)
	}
	p := 47
	sl := int(b[p])
	p++
	if p+sl+1+macLen > len(b) {
		return g, 0, fmt.Errorf("%w: segment length %d", ErrMalformed, sl)
	}
	if seg := b[p : p+sl]; segment != "" && string(seg) == segment {
		g.Segment = segment
	} else {
		g.Segment = string(seg)
	}
	p += sl
	tl := int(b[p])
	p++
	if p+tl+2+macLen > len(b) {
		return g, 0, fmt.Errorf("%w: tenant length %d", ErrMalformed, tl)
	}
	if tl > 0 {
		g.Tenant = string(b[p : p+tl])
	}
	p += tl
	nx := int(binary.BigEndian.Uint16(b[p:]))
	p += 2
	if nx > MaxExtents || p+16*nx+macLen != len(b) {
		return g, 0, fmt.Errorf("%w: %d extents in %d bytes", ErrMalformed, nx, len(b)-p-macLen)
	}
	if nx > 0 {
		g.Extents = make([]Extent, nx)
		for i := range g.Extents {
			g.Extents[i] = Extent{binary.BigEndian.Uint64(b[p:]), binary.BigEndian.Uint64(b[p+8:])}
			p += 16
		}
	}
	if err := checkExtents(g); err != nil {
		return g, 0, err
	}
	return g, p, nil
}

// checkExtents: non-empty, no overflow, sorted, not overlapping.
func checkExtents(g Grant) error {
	for i, x := range g.Extents {
		if x.Length == 0 || x.Addr+x.Length < x.Addr || (i > 0 && x.Addr < g.Extents[i-1].Addr+g.Extents[i-1].Length) {
			return fmt.Errorf("%w: extent %d %#x+%d", ErrMalformed, i, x.Addr, x.Length)
		}
	}
	return nil
}

// Verifier checks grants against a keyring and a clock. Safe for
// concurrent use.
type Verifier struct {
	keys *Keyring
	now  func() time.Time

	mu   sync.RWMutex
	live map[uint64]time.Time // one-shot nonces held live, with their expiry

	sets     atomic.Uint32 // Sets made, numbering their counter stripes
	verified striped       // verified
	refused  atomic.Uint64
	denied   atomic.Uint64
}

// striped is a counter in stripes of their own cache lines: the lanes of
// a node, each counting in its own, do not contend for one.
type striped [8]struct {
	n atomic.Uint64
	_ [56]byte
}

func (c *striped) add(i uint32) { c[i%uint32(len(c))].n.Add(1) }

func (c *striped) load() (n uint64) {
	for i := range c {
		n += c[i].n.Load()
	}
	return n
}

// NewVerifier returns a verifier; now nil means time.Now.
func NewVerifier(keys *Keyring, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{keys: keys, now: now, live: map[uint64]time.Time{}}
}

// Keys returns the verifier's keyring (an issuer in the same process mints
// with it).
func (v *Verifier) Keys() *Keyring { return v.keys }

// Now is the verifier's clock.
func (v *Verifier) Now() time.Time { return v.now() }

// Verify decodes b and checks its signature, that it names segment (when
// segment is not empty), that it has not expired and, for a one-shot
// grant, that it is still live.
func (v *Verifier) Verify(b []byte, segment string) (Grant, error) {
	return v.verifyAs(b, segment, nil)
}

// verifyAs is Verify for set (nil: none), with its MAC state and counting
// in its stripe.
func (v *Verifier) verifyAs(b []byte, segment string, set *Set) (Grant, error) {
	g, err := v.verify(b, segment, set)
	if err != nil {
		v.refused.Add(1)
		return Grant{}, err
	}
	var stripe uint32
	if set != nil {
		stripe = set.stripe
	}
	v.verified.add(stripe)
	return g, nil
}

func (v *Verifier) verify(b []byte, segment string, set *Set) (Grant, error) {
	g, n, err := decode(b, segment)
	if err != nil {
		return Grant{}, err
	}
	var known, equal bool
	if set != nil {
		known, equal = set.check(g.KeyID, b[:n], b[n:])
	} else {
		known, equal = v.keys.check(g.KeyID, b[:n], b[n:])
	}
	if !known {
		return Grant{}, fmt.Errorf("%w: %d", ErrUnknownKey, g.KeyID)
	}
	if !equal {
		return Grant{}, ErrBadMAC
	}
	if segment != "" && g.Segment != segment {
		return Grant{}, fmt.Errorf("%w: %q, this is %q", ErrWrongSegment, g.Segment, segment)
	}
	if !v.now().Before(g.Expires) {
		return Grant{}, ErrExpired
	}
	if g.Flags&FlagOneShot != 0 && !v.Live(g.Nonce) {
		return Grant{}, ErrRevoked
	}
	return g, nil
}

// Hold marks a one-shot grant's nonce live until Release (or its expiry).
func (v *Verifier) Hold(nonce uint64, expires time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.live) >= 1024 {
		now := v.now()
		for n, t := range v.live {
			if !now.Before(t) {
				delete(v.live, n)
			}
		}
	}
	v.live[nonce] = expires
}

// Release ends a one-shot grant: from now on it is refused everywhere.
func (v *Verifier) Release(nonce uint64) {
	v.mu.Lock()
	delete(v.live, nonce)
	v.mu.Unlock()
}

// Live reports whether a one-shot nonce is held live and not expired.
func (v *Verifier) Live(nonce uint64) bool {
	v.mu.RLock()
	t, ok := v.live[nonce]
	v.mu.RUnlock()
	return ok && v.now().Before(t)
}

// Mint signs a one-shot grant for segment and holds it live; the caller
// Releases g.Nonce when the request it was minted for ends.
func (v *Verifier) MintOneShot(g Grant) ([]byte, Grant, error) {
	g.Flags |= FlagOneShot
	if g.Nonce == 0 {
		g.Nonce = v.keys.nonce()
	}
	b, err := v.keys.Encode(g)
	if err != nil {
		return nil, Grant{}, err
	}
	v.Hold(g.Nonce, g.Expires)
	g.KeyID = v.keys.current
	return b, g, nil
}

// Stats are the verifier's counters.
type Stats struct {
	Verified uint64 // grants that verified
	Refused  uint64 // grants that did not (forged, expired, other key, revoked, ...)
	Denied   uint64 // requests no valid grant covered
}

// Stats returns the counters.
func (v *Verifier) Stats() Stats {
	return Stats{Verified: v.verified.load(), Refused: v.refused.Load(), Denied: v.denied.Load()}
}

// SetSize is how many grants a Set keeps: the last SetSize it installed
// (the oldest goes first). A sender on a connection may count on the
// last SetSize grants it sent there being kept, those that verified, and
// not send them again (internal/transport/tcp does).
const SetSize = 64

// Set is the verified grants of one connection: a ring of the SetSize
// newest. Not safe for concurrent use (one connection is served by one
// goroutine).
type Set struct {
	v       *Verifier
	segment string
	ring    [SetSize]Grant
	// spans[i] is ring[i]'s first extent and mode, packed: Allow scans
	// them, and looks at ring[i] only for a candidate.
	spans  [SetSize]span
	n      int    // grants in the ring
	next   int    // where the next one goes
	stripe uint32 // of the verifier's counters
	// mac is the MAC state of key macID this set verifies with (made at
	// the first grant of that key): a connection's goroutine takes no
	// state from the keyring's pool per grant.
	mac   *macState
	macID uint32
}

// check is Keyring.check with the set's own MAC state.
func (s *Set) check(id uint32, msg, want []byte) (known, equal bool) {
	if s.mac == nil || s.macID != id {
		st := s.v.keys.checkState(id)
		if st == nil {
			return false, false
		}
		s.mac, s.macID = st, id
	}
	return true, s.mac.equal(msg, want)
}

// span is a kept grant's first extent [addr, end), its mode (0: an empty
// slot) and whether it has more extents.
type span struct {
	addr, end uint64
	mode      Mode
	more      bool
}

// NewSet returns an empty set for a connection to segment.
func (v *Verifier) NewSet(segment string) *Set {
	return &Set{v: v, segment: segment, stripe: v.sets.Add(1)}
}

// Install verifies an encoded grant and keeps it as the newest (the
// oldest goes when the ring is full). A grant installed again takes
// another slot: the set does not look for it among those it keeps (a
// sender does not send a grant again while the set keeps it, SetSize),
// and Allow finds whichever copy is newest.
//
// Each grant that arrives is verified, also one this verifier verified
// before on another connection: a table of verified grants, looked up by
// their MAC, is not kept, since a look-up of a table too large for the
// processor's caches, as a pool's working set makes it, costs as much as
// the MAC of a short grant (some 60 bytes signed).
func (s *Set) Install(b []byte) error {
	g, err := s.v.verifyAs(b, s.segment, s)
	if err != nil {
		return err
	}
	s.ring[s.next] = g
	s.spans[s.next] = span{addr: g.Addr, end: g.Addr + g.Length, mode: g.Mode, more: len(g.Extents) > 0}
	s.next = (s.next + 1) % SetSize
	s.n = min(s.n+1, SetSize)
	return nil
}

// Allow returns nil when a kept grant that has not expired (and, if
// one-shot, is still live) allows mode on [addr, addr+n), ErrDenied
// otherwise. It looks at the newest grants first.
func (s *Set) Allow(mode Mode, addr, n uint64) error {
	if s.Allows(mode, addr, n) {
		return nil
	}
	s.v.denied.Add(1)
	return ErrDenied
}

// Allows is Allow without counting a denial: for looking ahead at
// requests that are checked again (and counted) when served.
func (s *Set) Allows(mode Mode, addr, n uint64) bool {
	end := addr + n
	if n == 0 || end < addr {
		return false
	}
	var now time.Time
	for k, i := 0, s.next; k < s.n; k++ { // newest first
		if i--; i < 0 {
			i = SetSize - 1
		}
		sp := &s.spans[i]
		if sp.mode&mode != mode || mode == 0 {
			continue
		}
		g := &s.ring[i]
		if (addr < sp.addr || end > sp.end) && (!sp.more || !g.Covers(mode, addr, n)) {
			continue
		}
		if now.IsZero() {
			now = s.v.now()
		}
		if !now.Before(g.Expires) {
			continue
		}
		if g.Flags&FlagOneShot != 0 && !s.v.Live(g.Nonce) {
			continue
		}
		return true
	}
	return false
}

// Check verifies an encoded grant and that it allows mode on [addr,
// addr+n) of segment: the one-request form of Install + Allow.
func (v *Verifier) Check(b []byte, segment string, mode Mode, addr, n uint64) error {
	g, err := v.Verify(b, segment)
	if err != nil {
		return err
	}
	if !g.Covers(mode, addr, n) {
		v.denied.Add(1)
		return ErrDenied
	}
	return nil
}

// Proofs of mount. A master that signs grants signs them for the engine
// (Segment) and addresses a segment's mount names; were any client able to
// mount a segment naming another node's engine and range, the master
// would place that client's objects there and hand it grants on the
// node's memory. So with grants a mount carries a proof: a grant signed
// with the shared key (which storage nodes hold and clients do not) over
// the segment's engine and range (Read|Write), for the mounting client
// (Lease: a hash of its id), valid MountProofTTL.

// MountProofTTL is how long a proof of mount is valid.
const MountProofTTL = 2 * time.Minute

// mountLease binds a proof of mount to a client id (FNV-1a, 64 bits).
func mountLease(clientID string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(clientID); i++ {
		h ^= uint64(clientID[i])
		h *= 1099511628211
	}
	return h
}

// MountProof signs the proof that clientID may mount the segment of
// engine endpoint at [base, base+size).
func (k *Keyring) MountProof(clientID, endpoint string, base, size uint64, now time.Time) ([]byte, error) {
	return k.Encode(Grant{Segment: endpoint, Addr: base, Length: size, Mode: Read | Write, Expires: now.Add(MountProofTTL), Lease: mountLease(clientID)})
}

// ErrMountProof: a mount without a valid proof (MountProof).
var ErrMountProof = errors.New("grant: a segment mount needs a proof signed with the grant key (the storage node's --grant-key-file)")

// CheckMount verifies a proof of mount of clientID's segment of engine
// endpoint at [base, base+size).
func (v *Verifier) CheckMount(proof []byte, clientID, endpoint string, base, size uint64) error {
	if len(proof) == 0 {
		return ErrMountProof
	}
	g, err := v.Verify(proof, endpoint)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMountProof, err)
	}
	if g.Addr != base || g.Length != size || g.Mode != Read|Write || g.Lease != mountLease(clientID) || g.Flags != 0 || len(g.Extents) > 0 {
		return fmt.Errorf("%w: the proof is for another segment or client", ErrMountProof)
	}
	return nil
}
