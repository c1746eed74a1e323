// Package grant is the capability core of the data path: a grant names
// exactly one extent of one transfer-engine segment (address, length),
// what it allows (READ, WRITE or both), until when, for which tenant and
// which request or lease, signed with HMAC-SHA256 under a key that the
// issuer and the verifier share.
//
// # Who issues, who checks
//
// The master mints grants for the extents of each placement (WRITE) and
// replica list (READ) it hands a client; storage nodes, which share the
// master's key, verify them. The decode side of a P/D transfer mints
// grants for the KV blocks it asks the prefill side to write, and verifies
// them itself (one-shot grants, see below). The package does no I/O: keys
// come in as bytes (LoadKeys parses a key file), time comes from an
// injected clock.
//
// # Encoding
//
// A grant is a compact binary record (Encode/Decode), hand-written because
// it is a fixed layout of a dozen fields whose bytes the MAC covers
// verbatim (a protobuf or JSON encoding is not canonical):
//
//	version u8 (1) | mode u8 | flags u8 | key id u32 |
//	addr u64 | length u64 | expires i64 (unix ns) | lease u64 | nonce u64 |
//	segment len u8 | segment | tenant len u8 | tenant |
//	mac [32]byte = HMAC-SHA256(key[key id], everything before it)
//
// integers big-endian. Decode bounds every field; FuzzDecode fuzzes it.
//
// # Keys and rotation
//
// A Keyring holds keys by id; the highest id signs new grants, every id
// verifies. To rotate: add a key with a higher id to the key file of every
// verifier first, then of the issuers; remove the old key once the
// longest-lived grant signed with it has expired. A grant naming an
// unknown key id is refused (ErrUnknownKey).
//
// # Checks
//
// Verifier.Verify refuses a grant that does not decode, names an unknown
// key, fails its MAC, names another segment, has expired, or (one-shot)
// is no longer live. Set is the per-connection cache of verified grants
// the transfer engine keeps: a grant is verified once when it arrives,
// and each READ/WRITE then only checks that its extent lies inside a
// cached grant of the right mode that has not expired (a few comparisons,
// no MAC). Verify allocates nothing. A grant that arrives again on another
// connection is verified again (no table of verified grants is kept: a
// look-up that misses the processor's caches costs as much as the MAC);
// a sender does not send a grant again while the connection's Set keeps
// it (the last SetSize).
// Set.Allow re-checks the liveness of one-shot grants on every
// request, so revoking one takes effect at once on every connection.
//
// # One-shot grants and replay
//
// Store grants are bearer capabilities until they expire (their expiry is
// tied to the lease the master keeps for the extent, so the bytes cannot
// be reallocated while the grant is valid). A one-shot grant (FlagOneShot)
// is valid only while its issuer holds it live (Verifier.Hold ... Release):
// the issuer and the verifier are the same process (a decode engine), so
// once the request it was minted for ends, replaying it is refused
// (ErrRevoked) even before it expires.
package grant
