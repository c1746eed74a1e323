package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"unsafe"
)

// mc_engine_segment hands through out the buffers a peer's segment holds,
// as JSON [{"addr", "length", "location"}] (what mooncake.tent's
// get_segment_info reports); -101 when the segment cannot be found.
//
//export mc_engine_segment
func mc_engine_segment(h C.int64_t, segment *C.char, out *unsafe.Pointer) C.int64_t {
	name := goString(segment)
	return engineBytes(h, "segment info", out, func(s *engineState) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		d, err := s.e.Segment(ctx, name)
		if err != nil {
			return nil, err
		}
		type buf struct {
			Addr     uint64 `json:"addr"`
			Length   uint64 `json:"length"`
			Location string `json:"location"`
		}
		bs := make([]buf, len(d.Buffers))
		for i, b := range d.Buffers {
			bs[i] = buf{b.Addr, b.Length, b.Location}
		}
		return json.Marshal(bs)
	})
}
