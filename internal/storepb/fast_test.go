package storepb

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// samples are hot-path messages with every field set.
func samples() []proto.Message {
	rc := &ReplicateConfig{Replicas: 2, SoftPin: true, SoftPinTtlMs: 1500, PreferredSegments: []string{"a", "b"}, HardPin: true, PromoteSeq: 9}
	reps := []*Replica{{Segment: "seg-1", Endpoint: "node-1", Addr: 1 << 40, Size: 4096}, {Segment: "seg-2", Endpoint: "node-2", Addr: 77, Size: 4096}}
	return []proto.Message{
		&KeyRequest{Key: "k/1"},
		&BatchKeysRequest{Keys: []string{"a", "", "c"}},
		&PutCommitRequest{ClientId: "c1", Key: "key", Slot: "\x00slot/1", Crc32C: 0xdeadbeef, Config: rc, Upsert: true, ReserveSize: 4096, ReserveKeyLen: 12},
		&PutCommitResponse{Status: &Status{Code: -200, Message: "no room"}, SlotGone: true,
			Tombstones: []*HeaderRef{{Segment: "seg-1", Endpoint: "node-1", Offset: 5, Addr: 12, Seq: 64}}, NextSlot: "\x00slot/2",
			Next: &PutStartResponse{Status: &Status{}, Replicas: reps, Seq: 42, HeaderLen: 64}},
		&ObjectInfo{Status: &Status{Code: 0}, Key: "k", Size: 4096, Crc32C: 7, Replicas: reps, LeaseTtlMs: 500, Complete: true,
			CreatedUnixMs: 1, LastAccessUnixMs: 2, LeaseUntilUnixMs: 3, SoftPinUntilUnixMs: 4, HardPin: true,
			Disk: []*DiskCopy{{Url: "http://x", Seq: 3, Segment: "s"}}, Promote: true},
		&PutStartRequest{ClientId: "c", Key: "k", Size: 9, Config: rc, Upsert: true},
		&PutStartResponse{Status: &Status{Code: -1}, Replicas: reps, Seq: 1, HeaderLen: 2},
	}
}

// The fast codec writes what proto.Marshal writes and reads what it reads.
func TestFastCodecMatchesProto(t *testing.T) {
	for _, m := range samples() {
		fast, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		slow, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fast, slow) {
			t.Errorf("%T: Marshal %x, proto.Marshal %x", m, fast, slow)
		}
		got := m.ProtoReflect().New().Interface()
		if err := Unmarshal(slow, got); err != nil || !proto.Equal(got, m) {
			t.Errorf("%T: Unmarshal = %v, %v; want %v", m, got, err, m)
		}
	}
}

// MarshalAppend appends Marshal's bytes after what the buffer holds, into
// its room when it has enough.
func TestMarshalAppend(t *testing.T) {
	buf := make([]byte, 0, 4096)
	for _, m := range samples() {
		want, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, prefix := range [][]byte{nil, []byte("head")} {
			b := append(buf[:0], prefix...)
			got, err := MarshalAppend(b, m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], want) {
				t.Errorf("%T after %q: %x, want %x", m, prefix, got, want)
			}
			if &got[0] != &buf[:1][0] {
				t.Errorf("%T: appended elsewhere although the buffer had room", m)
			}
		}
		if got, err := MarshalAppend(nil, m); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%T to nil: %x, %v", m, got, err)
		}
	}
}

// FuzzUnmarshal: the fast decoders of what the master and its clients read
// off the network never panic, and agree with proto.Unmarshal on what
// both take.
func FuzzUnmarshal(f *testing.F) {
	for i, m := range samples() {
		b, _ := proto.Marshal(m)
		f.Add(uint8(i), b)
	}
	f.Add(uint8(0), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		all := samples()
		m := all[int(which)%len(all)]
		fast := m.ProtoReflect().New().Interface()
		slow := m.ProtoReflect().New().Interface()
		aliased := m.ProtoReflect().New().Interface()
		errFast := Unmarshal(b, fast)
		errSlow := proto.Unmarshal(b, slow)
		in := bytes.Clone(b)
		errAliased := UnmarshalAliasing(in, aliased)
		if !bytes.Equal(in, b) {
			t.Fatalf("%T: UnmarshalAliasing wrote into its input", m)
		}
		if (errAliased == nil) != (errFast == nil) {
			t.Fatalf("%T: aliasing decoder: %v, copying one: %v", m, errAliased, errFast)
		}
		// The fast codec may refuse what proto.Unmarshal keeps as unknown
		// fields (a known field number with another wire type): our peers
		// never send that, and a refusal is a clean error.
		dropUnknown(fast.ProtoReflect())
		dropUnknown(slow.ProtoReflect())
		dropUnknown(aliased.ProtoReflect())
		if errFast == nil && errSlow == nil && !proto.Equal(fast, slow) {
			t.Fatalf("%T: decoders disagree on %x: %v vs %v", m, b, fast, slow)
		}
		if errFast == nil && !proto.Equal(fast, aliased) {
			t.Fatalf("%T: aliasing decoder disagrees on %x: %v vs %v", m, b, aliased, fast)
		}
	})
}

// dropUnknown clears the unknown fields of m and its submessages: the two
// decoders keep them, but not always byte for byte the same (a tag in a
// non-minimal varint).
func dropUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil:
		case fd.IsList():
			for i := range v.List().Len() {
				dropUnknown(v.List().Get(i).Message())
			}
		case !fd.IsMap():
			dropUnknown(v.Message())
		}
		return true
	})
}

// UnmarshalRequest refuses what proto.Unmarshal refuses for proto3
// strings: invalid UTF-8, at the top or nested, single or repeated.
func TestUnmarshalRequestUTF8(t *testing.T) {
	bad := "k\xff"
	for _, m := range []proto.Message{
		&KeyRequest{Key: bad},
		&BatchKeysRequest{Keys: []string{"ok", bad}},
		&PutCommitRequest{ClientId: "c", Key: "k", Config: &ReplicateConfig{PreferredSegments: []string{bad}}},
		&BatchPutStartRequest{Puts: []*PutStartRequest{{Key: "a"}, {Key: bad}}},
	} {
		b, err := proto.MarshalOptions{}.Marshal(m) // refuses too: encode by hand below
		if err == nil {
			t.Fatalf("%T: proto.Marshal took invalid UTF-8", m)
		}
		if b, err = m.(interface{ MarshalVT() ([]byte, error) }).MarshalVT(); err != nil {
			t.Fatal(err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := UnmarshalRequest(b, got); err == nil {
			t.Errorf("%T: UnmarshalRequest took invalid UTF-8", m)
		}
		if err := proto.Unmarshal(b, m.ProtoReflect().New().Interface()); err == nil {
			t.Errorf("%T: proto.Unmarshal took invalid UTF-8 (the test's premise)", m)
		}
	}
	good, _ := proto.Marshal(&PutCommitRequest{ClientId: "c", Key: "ключ", Config: &ReplicateConfig{PreferredSegments: []string{"s"}}})
	if err := UnmarshalRequest(good, &PutCommitRequest{}); err != nil {
		t.Fatalf("valid request refused: %v", err)
	}
}

// TestRequestUTF8CoversEveryString: for each request requestUTF8 knows,
// every string field (nested and repeated ones too) set to invalid UTF-8
// alone makes it refuse the message, so a string field added to one of
// them later cannot slip past it.
func TestRequestUTF8CoversEveryString(t *testing.T) {
	for _, m := range []proto.Message{&KeyRequest{}, &BatchKeysRequest{}, &PutCommitRequest{}, &PutStartRequest{},
		&PutRevokeRequest{}, &BatchPutStartRequest{}, &BatchPutCommitRequest{}, &RemountSegmentsRequest{}} {
		if _, known := requestUTF8(m); !known {
			t.Fatalf("%T: not known", m)
		}
		for _, path := range stringPaths(m.ProtoReflect().Descriptor(), nil) {
			bad := m.ProtoReflect().New()
			setPath(bad, path, "x\xff")
			if ok, _ := requestUTF8(bad.Interface()); ok {
				t.Errorf("%T: invalid UTF-8 in %v passed", m, path)
			}
			good := m.ProtoReflect().New()
			setPath(good, path, "ok")
			if ok, _ := requestUTF8(good.Interface()); !ok {
				t.Errorf("%T: valid %v refused", m, path)
			}
		}
	}
}

// stringPaths lists the paths to every string field under d.
func stringPaths(d protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor) [][]protoreflect.FieldDescriptor {
	var out [][]protoreflect.FieldDescriptor
	fields := d.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		p := append(append([]protoreflect.FieldDescriptor(nil), prefix...), fd)
		switch {
		case fd.Kind() == protoreflect.StringKind:
			out = append(out, p)
		case fd.Message() != nil && !fd.IsMap() && len(prefix) < 3:
			out = append(out, stringPaths(fd.Message(), p)...)
		}
	}
	return out
}

// setPath sets the string at path to s, making the messages (one list
// element for repeated fields) on the way.
func setPath(m protoreflect.Message, path []protoreflect.FieldDescriptor, s string) {
	fd := path[0]
	if len(path) == 1 {
		if fd.IsList() {
			m.Mutable(fd).List().Append(protoreflect.ValueOfString(s))
		} else {
			m.Set(fd, protoreflect.ValueOfString(s))
		}
		return
	}
	var sub protoreflect.Message
	if fd.IsList() {
		l := m.Mutable(fd).List()
		sub = l.NewElement().Message()
		l.Append(protoreflect.ValueOfMessage(sub))
	} else {
		sub = m.Mutable(fd).Message()
	}
	setPath(sub, path[1:], s)
}
