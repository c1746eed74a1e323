package objheader

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"time"
)

// Magic marks a header ("MCOB").
const Magic = 0x424F434D

// fixed is the size of the fixed part; Align the granularity of Len.
const (
	fixed = 48
	Align = 64
)

// Flags of a header.
const (
	FlagHardPin = 1 << 0
	FlagSoftPin = 1 << 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrInvalid reports bytes that are not a valid header.
var ErrInvalid = errors.New("objheader: not a valid header")

// Header describes one object.
type Header struct {
	Key        string
	Seq        uint64
	Size       uint64
	CRC        uint32
	HardPin    bool
	SoftPin    bool
	SoftPinTTL time.Duration
}

// Len is the length of the header of key: the fixed part plus the key,
// rounded up to 64 bytes.
func Len(key string) uint64 { return LenOf(len(key)) }

// LenOf is Len of a key of n bytes.
func LenOf(n int) uint64 { return (fixed + uint64(n) + Align - 1) &^ (Align - 1) }

// Encode writes h into b, which must hold Len(h.Key) bytes, and returns
// the encoded bytes (b[:Len], the padding zeroed).
func Encode(b []byte, h Header) []byte { return EncodePrefixed(b, "", h) }

// EncodePrefixed is Encode of h with its key being prefix+h.Key (b holds
// LenOf(len(prefix)+len(h.Key)) bytes), without building that key.
func EncodePrefixed(b []byte, prefix string, h Header) []byte {
	kl := len(prefix) + len(h.Key)
	n := LenOf(kl)
	b = b[:n]
	clear(b)
	le := binary.LittleEndian
	le.PutUint32(b[0:], Magic)
	le.PutUint32(b[4:], uint32(n))
	le.PutUint64(b[8:], h.Seq)
	le.PutUint64(b[16:], h.Size)
	le.PutUint32(b[24:], h.CRC)
	var flags uint32
	if h.HardPin {
		flags |= FlagHardPin
	}
	if h.SoftPin {
		flags |= FlagSoftPin
	}
	le.PutUint32(b[28:], flags)
	le.PutUint64(b[32:], uint64(h.SoftPinTTL.Milliseconds()))
	le.PutUint32(b[40:], uint32(kl))
	copy(b[fixed+len(prefix):], h.Key)
	copy(b[fixed:], prefix)
	le.PutUint32(b[44:], hcrc(b, kl))
	return b
}

func hcrc(b []byte, keyLen int) uint32 {
	c := crc32.Update(0, castagnoli, b[:44])
	return crc32.Update(c, castagnoli, b[fixed:fixed+keyLen])
}

// Decode parses the header at the start of b (which may extend past it).
func Decode(b []byte) (Header, error) {
	le := binary.LittleEndian
	if len(b) < fixed || le.Uint32(b) != Magic {
		return Header{}, ErrInvalid
	}
	keyLen := int(le.Uint32(b[40:]))
	n := le.Uint32(b[4:])
	if keyLen > 1<<20 || uint64(n) != (fixed+uint64(keyLen)+Align-1)&^(Align-1) || uint64(len(b)) < uint64(n) {
		return Header{}, ErrInvalid
	}
	if hcrc(b, keyLen) != le.Uint32(b[44:]) {
		return Header{}, ErrInvalid
	}
	flags := le.Uint32(b[28:])
	return Header{Key: string(b[fixed : fixed+keyLen]), Seq: le.Uint64(b[8:]), Size: le.Uint64(b[16:]), CRC: le.Uint32(b[24:]),
		HardPin: flags&FlagHardPin != 0, SoftPin: flags&FlagSoftPin != 0,
		SoftPinTTL: time.Duration(min(le.Uint64(b[32:]), 1<<40)) * time.Millisecond}, nil
}

// Found is a valid object found by Scan at Offset (of its header).
type Found struct {
	Header
	Offset uint64
}

// Scan walks mem at 64-byte steps and returns every valid header whose
// value lies inside mem and matches its CRC32C, in offset order.
func Scan(mem []byte) []Found { return ScanRanges(mem, [][2]int{{0, len(mem)}}) }

// ScanRanges is Scan looking for headers only at offsets inside ranges
// ([start, end) offsets into mem, in order, not overlapping): the parts of
// mem that hold data, when the rest is known to be zeros. A value is read
// wherever it lies.
func ScanRanges(mem []byte, ranges [][2]int) []Found {
	var out []Found
	le := binary.LittleEndian
	for _, r := range ranges {
		lo, hi := max(r[0], 0), min(r[1], len(mem))
		for off := (lo + Align - 1) &^ (Align - 1); off < hi && off+fixed <= len(mem); off += Align {
			if le.Uint32(mem[off:]) != Magic {
				continue
			}
			h, err := Decode(mem[off:])
			if err != nil {
				continue
			}
			start := uint64(off) + Len(h.Key)
			if h.Size == 0 || h.Size > uint64(len(mem)) || start+h.Size > uint64(len(mem)) {
				continue
			}
			if crc32.Checksum(mem[start:start+h.Size], castagnoli) != h.CRC {
				continue
			}
			out = append(out, Found{Header: h, Offset: uint64(off)})
		}
	}
	return out
}

// Zeroing by a remover. A client that removes durable objects zeroes the
// headers the master names in its answer itself, with blind writes into
// the node's memory (a transfer cannot compare before it writes). So that
// such a write never lands on a newer object placed at the same bytes, a
// remover writes only within ZeroWithin of sending the call whose answer
// named the header (it gives the write up after that; the node zeroes the
// header anyway), and the master keeps a named header's bytes allocated
// for ZeroFence after it named them, even once the node reports it zeroed.
// ZeroWithin is twice the store client's default RPC timeout, so that a
// call that took all of its timeout still leaves as long for the zeroing.
const (
	ZeroWithin = 10 * time.Second
	ZeroFence  = 3 * ZeroWithin
)

// Clear zeroes the header at the start of b when it is a valid header with
// a sequence number up to seq (the tombstone's object, or an older one left
// at the same place), and reports whether it did (a header already gone, or
// overwritten by a newer object, is left alone).
func Clear(b []byte, seq uint64) bool {
	h, err := Decode(b)
	if err != nil || h.Seq > seq {
		return false
	}
	clear(b[:fixed])
	return true
}
