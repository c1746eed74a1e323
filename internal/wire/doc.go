// Package wire holds the byte formats the transfer engine speaks on the
// network, with decoders that treat every input as hostile.
//
// Control frames (the engine's RPC port) follow Mooncake's handshake framing:
// a little-endian u64 length that counts the type byte, one type byte
// (FrameConnection=0, FrameMetadata=1, FrameNotify=2, FrameProbe=3, and our
// FrameLane=4 which turns the connection into a data lane), then a JSON body
// (Control). Frames are bounded (MaxControlFrame by default, 1 MiB).
//
// Data lanes carry fixed-size binary headers, little-endian:
//
//	request  (32 bytes): op u8 | flags u8 | reserved u16 | crc32c u32 | id u64 | addr u64 | length u64
//	response (24 bytes): status u8 | flags u8 | reserved u16 | crc32c u32 | id u64 | length u64
//
// A WRITE request is followed by length payload bytes; the response to a READ
// with StatusOK is followed by length payload bytes. Scatter-gather requests
// (OpReadV=3, OpWriteV=4) carry the extent count in addr and the total
// payload in length, then an extent table (count x {addr u64, length u64},
// 1..MaxExtents entries, each non-empty, adding up to length exactly:
// DecodeExtents), then for OpWriteV the payload (the extents' bytes in
// order); one response answers the whole request (for OpReadV with the
// extents' bytes in order). A lane's handshake reply says whether it
// serves them (Control.Vectored); OpRead and OpWrite are unchanged. Responses come back in
// request order on a lane; the id lets both sides check that. FlagCRC says the
// crc field holds the CRC32C (Castagnoli) of the payload.
//
// Segment descriptors (what OpenSegment learns about a peer) are JSON with
// Mooncake's field names where Mooncake has one (name, protocol,
// tcp_data_port, timestamp, buffers[{name, addr, length}]) plus ours.
package wire
