package storepb

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

func remountSample() *RemountSegmentsRequest {
	return &RemountSegmentsRequest{ClientId: "node-1", RestoreId: 7, Chunk: 3, More: true, Total: 1 << 40,
		Segments: []*Segment{{Name: "seg-1", Endpoint: "ep", Base: 1 << 30, Size: 1 << 20, DiskUrl: "http://d", OffloadOnEvict: true, PromotionOnHit: true}},
		Objects: []*HeldObject{
			{Segment: "seg-1", Offset: 0, Key: "k/1", Size: 64, Crc32C: 9, Seq: 1, HardPin: true},
			{Segment: "seg-1", Offset: 128, Key: "k/2", Size: 64, Crc32C: 10, Seq: 2, SoftPin: true, SoftPinTtlMs: 1500},
			{Segment: "seg-1", Offset: 1 << 12, Key: "k/3", Size: 1, Seq: 3, Disk: true},
		}}
}

// GRPCCodec reads and writes what gRPC's protobuf codec does, for the
// remount's messages (its fast codec) and for the others (the protobuf
// codec itself).
func TestGRPCCodecMatchesProto(t *testing.T) {
	c := GRPCCodec()
	if c.Name() != "proto" {
		t.Fatalf("name %q, want proto (the content subtype it stands in for)", c.Name())
	}
	for _, m := range append(samples(), remountSample(), &RemountSegmentsResponse{Status: &Status{Code: 1}, Restored: 5, RestoreId: 9, Window: 8}) {
		out, err := c.Marshal(m)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(out.Materialize(), got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("%T: written %v, read back by proto.Unmarshal %v (%v)", m, m, got, err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got = m.ProtoReflect().New().Interface()
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("%T: written by proto.Marshal %v, read %v (%v)", m, m, got, err)
		}
	}
}

// A remount whose strings are not valid UTF-8 is refused, as the protobuf
// codec refuses it.
func TestGRPCCodecRefusesBadUTF8(t *testing.T) {
	for name, spoil := range map[string]func(r *RemountSegmentsRequest){
		"client":  func(r *RemountSegmentsRequest) { r.ClientId = "x\xff" },
		"segment": func(r *RemountSegmentsRequest) { r.Segments[0].Name = "x\xff" },
		"key":     func(r *RemountSegmentsRequest) { r.Objects[2].Key = "x\xff" },
		"report's segment": func(r *RemountSegmentsRequest) {
			r.Objects[1].Segment = "x\xff"
		},
	} {
		r := remountSample()
		spoil(r)
		b, err := r.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		if err := GRPCCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &RemountSegmentsRequest{}); err == nil {
			t.Errorf("%s: invalid UTF-8 accepted", name)
		}
		if err := proto.Unmarshal(b, &RemountSegmentsRequest{}); err == nil {
			t.Errorf("%s: the protobuf codec accepts it (the test's premise)", name)
		}
	}
}

// FuzzGRPCCodecRemount: GRPCCodec decodes any bytes as a remount request
// as proto.Unmarshal does: no invalid UTF-8 gets in, and what both take
// they read as the same message. Like the fast codec (FuzzUnmarshal) it
// may refuse what proto.Unmarshal keeps as unknown fields (a known field
// number with another wire type), and it skips as unknown a field number
// out of protobuf's range, which proto.Unmarshal refuses.
func FuzzGRPCCodecRemount(f *testing.F) {
	b, _ := proto.Marshal(remountSample())
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x1a, 0x03, 0x1a, 0x01, 0xff}) // a report whose key is not UTF-8
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got RemountSegmentsRequest
		werr := proto.Unmarshal(b, &want)
		gerr := GRPCCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got)
		if gerr != nil {
			return
		}
		dropUnknown(got.ProtoReflect())
		if _, err := proto.Marshal(&got); err != nil { // proto.Marshal checks the strings' UTF-8
			t.Fatalf("GRPCCodec took %x as %v, which proto.Marshal refuses: %v", b, &got, err)
		}
		if werr == nil {
			dropUnknown(want.ProtoReflect())
			if !proto.Equal(&want, &got) {
				t.Fatalf("proto.Unmarshal read %v, GRPCCodec %v", &want, &got)
			}
		}
	})
}

// BenchmarkRemountCodec: one remount call of 16,384 reports (a node's
// chunk) encoded and decoded by gRPC's protobuf codec and by GRPCCodec.
func BenchmarkRemountCodec(b *testing.B) {
	r := &RemountSegmentsRequest{ClientId: "127.0.0.1:1234/node", RestoreId: 1, Chunk: 7, More: true}
	for i := range 16384 {
		r.Objects = append(r.Objects, &HeldObject{Segment: "127.0.0.1:1234/seg", Offset: uint64(i) * 128, Key: fmt.Sprintf("obj/%09d", i),
			Size: 64, Crc32C: uint32(i), Seq: uint64(1<<40 + i)})
	}
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"proto", encoding.GetCodecV2("proto")}, {"fast", GRPCCodec()}} {
		b.Run("encode="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := c.codec.Marshal(r)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(out.Len()))
				out.Free()
			}
		})
		wire, _ := proto.Marshal(r)
		b.Run("decode="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				var got RemountSegmentsRequest
				if err := c.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &got); err != nil || len(got.Objects) != len(r.Objects) {
					b.Fatal(err)
				}
			}
		})
	}
}
