package storepb

import (
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec GRPCCodec falls back to
	"google.golang.org/grpc/mem"
)

// GRPCCodec is gRPC's protobuf codec, except for the messages that carry
// a remount's reports (RemountSegmentsRequest: up to 16,384 reports, a
// MiB, per call, millions per remount), which it encodes and decodes with
// their generated fast codec (vtprotobuf's MarshalVT and UnmarshalVT) and
// whose strings it checks for valid UTF-8 as proto.Unmarshal does
// (UnmarshalRequest). The bytes on the wire are the same protobuf
// encoding, so either end may use it alone. Reflection-driven encoding
// and decoding of the reports was about a third of a node's CPU and a
// seventh of the master's during a remount. A master's server sets it for
// every call (grpc.ForceServerCodecV2), a node for its remount calls
// (grpc.ForceCodecV2).
func GRPCCodec() encoding.CodecV2 { return grpcCodec{encoding.GetCodecV2("proto")} }

type grpcCodec struct{ proto encoding.CodecV2 }

// Name is the content subtype of the protobuf codec, which it stands in
// for.
func (c grpcCodec) Name() string { return c.proto.Name() }

func (c grpcCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*RemountSegmentsRequest); ok {
		b, err := m.MarshalVT()
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c grpcCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*RemountSegmentsRequest); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		return UnmarshalRequest(buf.ReadOnlyData(), m) // the strings are copied out of buf
	}
	return c.proto.Unmarshal(data, v)
}
