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
	var rs [RespHeaderSize]byte
	(&RespHeader{Status: StatusOK, ID: 1, Length: 10}).Put(rs[:])
	f.Add(rs[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 1 << 20
		if h, err := DecodeReqHeader(in, max); err == nil {
			if h.Length > max || (h.Op != OpRead && h.Op != OpWrite && h.Op != OpGrant) || (h.Op == OpGrant && h.Length > MaxGrant) {
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
