// Package objheader is the self-describing header a durable store object
// carries in segment memory, in front of its value. The store client
// writes it in the same transfer batch as the value, before PutCommit, so an
// acknowledged put always has a valid header on every replica; a storage
// node that remounts on a new or restarted master scans its memory for
// headers (Scan, or ScanRanges over only the parts of its memory that were
// ever written) and reports the objects it holds; the master zeroes the
// header of an object it frees (through the node, or through the client
// that removes it), so a removed object is not reported again.
//
// Layout (little-endian; Len(key) bytes, a multiple of 64):
//
//	0  magic   u32  "MCOB"
//	4  hdrLen  u32  Len(key)
//	8  seq     u64  put sequence number from the master (higher = newer)
//	16 size    u64  value length
//	24 crc     u32  CRC32C of the value
//	28 flags   u32  bit 0 hard pin, bit 1 soft pin
//	32 pinTTL  i64  soft pin TTL in ms
//	40 keyLen  u32
//	44 hcrc    u32  CRC32C of bytes [0,44) and the key
//	48 key
//
// The value follows at offset hdrLen. A header counts only when its hcrc
// and the value's CRC32C both match, so torn and unfinished writes are
// ignored. It is a leaf: it imports nothing of this module.
package objheader
