package main

import (
	"testing"
)

// FuzzPutOptions: any ReplicateConfig text from a caller parses or fails
// with INVALID_PARAMS; it never panics.
func FuzzPutOptions(f *testing.F) {
	for _, s := range []string{"", "{}", `{"replica_num":2,"soft_pin":true,"preferred_segments":["a"]}`,
		`{"soft_pin_ttl_ms":-1,"upsert":true}`, `{"replica_num":-1}`, `[1,2]`, `{"preferred_segments":null}`,
		"\x00", `{"replica_num":1e99}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		o, err := putOptions(in)
		if err != nil {
			if codeOf(err) != codeInvalidParams {
				t.Fatalf("putOptions(%q): %v maps to %d", in, err, codeOf(err))
			}
			return
		}
		if o.Replicas < 0 || o.Replicas > 64 || o.SoftPinTTL < 0 {
			t.Fatalf("putOptions(%q) accepted %+v", in, o)
		}
	})
}

// FuzzEngineArgs: initialize's arguments either make a valid transfer.Config
// or fail with a negative code; never a panic.
func FuzzEngineArgs(f *testing.F) {
	f.Add("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
	f.Add("127.0.0.1:17000", "http://127.0.0.1:8080/metadata", "rdma", "mlx5_0")
	f.Add("[::1]:1", "etcd://h:1", "shm", "")
	f.Add("h:p:q", "redis://x", "", "")
	f.Fuzz(func(t *testing.T, host, meta, proto, dev string) {
		cfg, _, err := engineArgs(host, meta, proto, dev)
		if err != nil {
			if codeOf(err) >= 0 {
				t.Fatalf("error %v has code %d", err, codeOf(err))
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted args give an invalid config: %v", err)
		}
	})
}
