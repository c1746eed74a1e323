package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func FuzzReadFrame(f *testing.F) {
	var ok bytes.Buffer
	_ = WriteFrame(&ok, FrameMetadata, []byte(`{"segment":{"name":"a:1","buffers":[]}}`))
	f.Add(ok.Bytes())
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(binary.LittleEndian.AppendUint64(nil, 0))
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 3), 4, '{', '}'))
	f.Fuzz(func(t *testing.T, in []byte) {
		typ, body, err := ReadFrame(bytes.NewReader(in), 4096)
		if err != nil {
			return
		}
		if len(body) >= 4096 || typ > FrameLane {
			t.Fatalf("accepted oversize/unknown frame: type %d len %d", typ, len(body))
		}
		if c, err := DecodeControl(body); err == nil && c.Segment != nil {
			if c.Segment.Validate() != nil {
				t.Fatal("DecodeControl returned an invalid segment")
			}
		}
	})
}

func FuzzDecodeSegment(f *testing.F) {
	f.Add([]byte(`{"name":"127.0.0.1:1","protocol":"tcp","buffers":[{"name":"b","addr":4096,"length":10}]}`))
	f.Add([]byte(`{"name":"","buffers":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := DecodeSegment(in)
		if err != nil {
			return
		}
		for _, b := range s.Buffers {
			if b.Addr == 0 || b.Length == 0 || b.Addr+b.Length < b.Addr {
				t.Fatalf("accepted bad buffer %+v", b)
			}
		}
	})
}

func FuzzDecodeHeaders(f *testing.F) {
	var rq [ReqHeaderSize]byte
	(&ReqHeader{Op: OpWrite, ID: 1, Addr: 4096, Length: 10}).Put(rq[:])
	f.Add(rq[:])
	var rg [ReqHeaderSize]byte
	(&ReqHeader{Op: OpGrant, Addr: 98, Length: 128}).Put(rg[:])
	f.Add(bytes.Clone(rg[:]))
	var rs [RespHeaderSize]byte
	(&RespHeader{Status: StatusOK, ID: 1, Length: 10}).Put(rs[:])
	f.Add(rs[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 1 << 20
		if h, err := DecodeReqHeader(in, max); err == nil {
			if h.Length > max || h.Op > OpWriteV || (h.Op == OpGrant && (h.Length > MaxGrant || h.GrantLen() > h.Length || h.Length-h.GrantLen() >= GrantAlign)) ||
				(h.Vectored() && (h.Addr == 0 || h.Addr > MaxExtents || h.Length < h.Addr)) {
				t.Fatalf("accepted %+v", h)
			}
			var out [ReqHeaderSize]byte
			h.Put(out[:])
			if !bytes.Equal(out[:], in[:ReqHeaderSize]) {
				t.Fatal("request header does not round-trip")
			}
		}
		if h, err := DecodeRespHeader(in, max); err == nil {
			if h.Length > max || h.Status > StatusDenied {
				t.Fatalf("accepted %+v", h)
			}
			var out [RespHeaderSize]byte
			h.Put(out[:])
			if !bytes.Equal(out[:], in[:RespHeaderSize]) {
				t.Fatal("response header does not round-trip")
			}
		}
	})
}

// FuzzDecodeExtents: a scatter-gather request's header and extent table
// as a lane reads them off the network. Whatever is accepted has between
// 1 and MaxExtents non-empty, non-wrapping extents that add up to the
// header's length, and round-trips.
func FuzzDecodeExtents(f *testing.F) {
	var hb [ReqHeaderSize]byte
	(&ReqHeader{Op: OpWriteV, ID: 7, Addr: 2, Length: 30}).Put(hb[:])
	f.Add(append(hb[:], PutExtents(nil, []Extent{{Addr: 4096, Length: 10}, {Addr: 8192, Length: 20}})...))
	(&ReqHeader{Op: OpReadV, ID: 8, Addr: 1, Length: 5}).Put(hb[:])
	f.Add(append(hb[:], PutExtents(nil, []Extent{{Addr: ^uint64(0) - 2, Length: 5}})...))
	(&ReqHeader{Op: OpWriteV, ID: 9, Addr: 2, Length: 2}).Put(hb[:])
	f.Add(append(hb[:], PutExtents(nil, []Extent{{Addr: 1, Length: ^uint64(0)}, {Addr: 2, Length: 3}})...))
	f.Add([]byte{OpReadV})
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 1 << 20
		h, err := DecodeReqHeader(in, max)
		if err != nil || !h.Vectored() {
			return
		}
		table := in[ReqHeaderSize:]
		if n := h.Addr * ExtentSize; uint64(len(table)) > n {
			table = table[:n]
		}
		ext, err := DecodeExtents(table, h.Addr, h.Length, nil)
		if err != nil {
			return
		}
		var sum uint64
		for _, e := range ext {
			if e.Length == 0 || e.Addr+e.Length < e.Addr {
				t.Fatalf("accepted extent %+v", e)
			}
			sum += e.Length
		}
		if uint64(len(ext)) != h.Addr || sum != h.Length || sum > max {
			t.Fatalf("accepted %d extents of %d bytes for header %+v", len(ext), sum, h)
		}
		if !bytes.Equal(PutExtents(nil, ext), table) {
			t.Fatal("extent table does not round-trip")
		}
	})
}
