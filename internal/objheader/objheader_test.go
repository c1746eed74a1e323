package objheader

import (
	"bytes"
	"hash/crc32"
	"testing"
	"time"
)

func TestRoundTripScanClear(t *testing.T) {
	mem := make([]byte, 64<<10)
	put := func(off int, key string, seq uint64, val []byte) {
		h := Header{Key: key, Seq: seq, Size: uint64(len(val)), CRC: crc32.Checksum(val, castagnoli), SoftPin: true, SoftPinTTL: time.Minute}
		b := Encode(make([]byte, Len(key)), h)
		copy(mem[off:], b)
		copy(mem[off+len(b):], val)
	}
	put(0, "a", 1, bytes.Repeat([]byte{1}, 1000))
	put(4096, "bb", 2, bytes.Repeat([]byte{2}, 100))
	put(8192, "torn", 3, bytes.Repeat([]byte{3}, 100))
	mem[8192+64+5] ^= 0xff // value does not match its CRC
	got := Scan(mem)
	if len(got) != 2 || got[0].Key != "a" || got[0].Offset != 0 || got[1].Key != "bb" || got[1].Seq != 2 || !got[1].SoftPin || got[1].SoftPinTTL != time.Minute {
		t.Fatalf("scan: %+v", got)
	}
	if Clear(mem[4096:], 1) || !Clear(mem[4096:], 2) {
		t.Fatal("clear compared the wrong sequence number")
	}
	if got := Scan(mem); len(got) != 1 {
		t.Fatalf("scan after clear: %+v", got)
	}
	if Len("") != 64 || Len(string(make([]byte, 17))) != 128 {
		t.Fatal("Len")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(make([]byte, 64), Header{Key: "k", Seq: 1, Size: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			return
		}
		if got := Encode(make([]byte, Len(h.Key)), h); !bytes.Equal(got, b[:len(got)]) {
			t.Fatalf("decode/encode mismatch")
		}
	})
}

// TestScanRanges: headers are looked for only inside the ranges (a value
// may extend past its range), and a range that is not 64-byte aligned
// starts at the next multiple of 64.
func TestScanRanges(t *testing.T) {
	mem := make([]byte, 64<<10)
	for i, off := range []int{0, 8192, 16384, 24576} {
		key := string(rune('a' + i))
		val := bytes.Repeat([]byte{byte(i + 1)}, 5000) // past the next 4 KiB
		b := Encode(make([]byte, Len(key)), Header{Key: key, Seq: uint64(i + 1), Size: uint64(len(val)), CRC: crc32.Checksum(val, castagnoli)})
		copy(mem[off:], b)
		copy(mem[off+len(b):], val)
	}
	keys := func(fs []Found) (s string) {
		for _, f := range fs {
			s += f.Key
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		ranges [][2]int
		want   string
	}{
		{"all", [][2]int{{0, len(mem)}}, "abcd"},
		{"none", nil, ""},
		{"two", [][2]int{{8192, 8256}, {24576, 28672}}, "bd"},
		{"unaligned start", [][2]int{{1, 16385}}, "bc"},
		{"end excluded", [][2]int{{8193, 16384}}, ""},
		{"clamped", [][2]int{{-100, 1}, {24576, 1 << 30}}, "ad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keys(ScanRanges(mem, tc.ranges)); got != tc.want {
				t.Fatalf("found %q, want %q", got, tc.want)
			}
		})
	}
	if got := keys(Scan(mem)); got != "abcd" {
		t.Fatalf("scan found %q", got)
	}
}

// TestEncodePrefixed: a header written with a key prefix is the header of
// the whole key, byte for byte, and decodes to it.
func TestEncodePrefixed(t *testing.T) {
	h := Header{Key: "user/key", Seq: 7, Size: 4096, CRC: 0xabcd, SoftPin: true, SoftPinTTL: time.Second}
	whole := h
	whole.Key = "\x00t/tenant/" + h.Key
	want := Encode(make([]byte, Len(whole.Key)), whole)
	got := EncodePrefixed(bytes.Repeat([]byte{0xff}, int(LenOf(len("\x00t/tenant/")+len(h.Key)))), "\x00t/tenant/", h)
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodePrefixed = %x, want %x", got, want)
	}
	d, err := Decode(got)
	if err != nil || d.Key != whole.Key || d.Seq != 7 {
		t.Fatalf("Decode = %+v, %v", d, err)
	}
}
