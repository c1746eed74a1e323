package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, typ := range []byte{FrameConnection, FrameMetadata, FrameNotify, FrameProbe, FrameLane} {
		var buf bytes.Buffer
		body := []byte(`{"ok":true}`)
		if err := WriteFrame(&buf, typ, body); err != nil {
			t.Fatal(err)
		}
		gt, gb, err := ReadFrame(&buf, MaxControlFrame)
		if err != nil || gt != typ || !bytes.Equal(gb, body) {
			t.Fatalf("got %d %q %v", gt, gb, err)
		}
	}
}

func TestFrameRejects(t *testing.T) {
	le := func(n uint64, rest string) []byte {
		b := binary.LittleEndian.AppendUint64(nil, n)
		return append(b, rest...)
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"zero length", le(0, ""), ErrBadFrame},
		{"too large", le(MaxControlFrame+1, "\x01"), ErrFrameTooLarge},
		{"huge", le(1<<63, "\x01"), ErrFrameTooLarge},
		{"http probe", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ErrFrameTooLarge},
		{"tls hello", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03}, ErrFrameTooLarge},
		{"unknown type", le(2, "\x09x"), ErrBadFrame},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadFrame(bytes.NewReader(tc.in), MaxControlFrame)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestHeaders(t *testing.T) {
	h := ReqHeader{Op: OpWrite, Flags: FlagCRC, CRC: 0xdeadbeef, ID: 7, Addr: 0x1000, Length: 4096}
	var b [ReqHeaderSize]byte
	h.Put(b[:])
	got, err := DecodeReqHeader(b[:], 1<<20)
	if err != nil || got != h {
		t.Fatalf("got %+v %v", got, err)
	}
	if _, err := DecodeReqHeader(b[:], 1024); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	b[0] = 9
	if _, err := DecodeReqHeader(b[:], 1<<20); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("bad op: %v", err)
	}
	r := RespHeader{Status: StatusRejected, ID: 9, Length: 0}
	var rb [RespHeaderSize]byte
	r.Put(rb[:])
	gr, err := DecodeRespHeader(rb[:], 1<<20)
	if err != nil || gr != r {
		t.Fatalf("got %+v %v", gr, err)
	}
	rb[2] = 1
	if _, err := DecodeRespHeader(rb[:], 1<<20); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("reserved: %v", err)
	}
}

func TestSegmentValidate(t *testing.T) {
	good := Segment{Name: "127.0.0.1:1", Protocol: "tcp", RPCPort: 1, Buffers: []Buffer{{Name: "b0", Addr: 4096, Length: 10}}}
	b, _ := json.Marshal(good)
	if _, err := DecodeSegment(b); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Segment){
		"no name":       func(s *Segment) { s.Name = "" },
		"zero addr":     func(s *Segment) { s.Buffers[0].Addr = 0 },
		"zero length":   func(s *Segment) { s.Buffers[0].Length = 0 },
		"empty bufname": func(s *Segment) { s.Buffers[0].Name = "" },
		"wrap":          func(s *Segment) { s.Buffers[0].Length = ^uint64(0) },
		"port":          func(s *Segment) { s.RPCPort = 70000 },
	} {
		t.Run(name, func(t *testing.T) {
			s := good
			s.Buffers = append([]Buffer(nil), good.Buffers...)
			mut(&s)
			b, _ := json.Marshal(s)
			if _, err := DecodeSegment(b); !errors.Is(err, ErrBadFrame) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// An OpGrant's payload is its grant, or the grant (Addr bytes) and less
// than GrantAlign bytes of padding.
func TestGrantHeader(t *testing.T) {
	for _, c := range []struct {
		addr, length, want uint64
		ok                 bool
	}{
		{0, 98, 98, true}, {98, 98, 98, true}, {98, 128, 98, true}, {97, 128, 97, true}, {96, 128, 0, false},
		{129, 128, 0, false}, {1, MaxGrant, 0, false}, {0, MaxGrant + 1, 0, false},
	} {
		var b [ReqHeaderSize]byte
		(&ReqHeader{Op: OpGrant, Addr: c.addr, Length: c.length}).Put(b[:])
		h, err := DecodeReqHeader(b[:], 1<<20)
		if (err == nil) != c.ok || err == nil && h.GrantLen() != c.want {
			t.Fatalf("%+v: %+v, %v", c, h, err)
		}
	}
	for n := range 100 {
		if p := GrantPad(n); p < 0 || p >= GrantAlign || (n+p)%GrantAlign != 0 {
			t.Fatalf("GrantPad(%d) = %d", n, p)
		}
	}
}
