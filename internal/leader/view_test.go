package leader

import (
	"errors"
	"testing"
)

func TestParseView(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want View
		err  error
	}{
		{"127.0.0.1:50051 7", View{"127.0.0.1:50051", 7}, nil},
		{"[::1]:9 12", View{"[::1]:9", 12}, nil},
		{"", View{}, ErrNoLeader},
		{"127.0.0.1:50051", View{}, ErrBadView},
		{"127.0.0.1:50051 0", View{}, ErrBadView},
		{"127.0.0.1:50051 -3", View{}, ErrBadView},
		{"127.0.0.1:50051 x", View{}, ErrBadView},
		{"127.0.0.1 7", View{}, ErrBadView},
		{":50051 7", View{}, ErrBadView},
		{"127.0.0.1:0 7", View{}, ErrBadView},
		{"127.0.0.1:70000 7", View{}, ErrBadView},
	} {
		got, err := ParseView([]byte(tc.in))
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("ParseView(%q) = %+v, %v; want %+v, %v", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil {
			if back, err := ParseView([]byte(got.String())); err != nil || back != got {
				t.Errorf("round trip of %+v: %+v, %v", got, back, err)
			}
		}
	}
}

func TestLeader(t *testing.T) {
	c := func(v string, rev int64) Candidate { return Candidate{Value: []byte(v), CreateRevision: rev} }
	for _, tc := range []struct {
		name  string
		cands []Candidate
		want  View
		err   error
	}{
		{"none", nil, View{}, ErrNoLeader},
		{"one", []Candidate{c("127.0.0.1:1 5", 5)}, View{"127.0.0.1:1", 5}, nil},
		{"oldest wins", []Candidate{c("", 9), c("127.0.0.1:2 4", 4), c("127.0.0.1:3 6", 6)}, View{"127.0.0.1:2", 4}, nil},
		{"leader not serving yet", []Candidate{c("", 3), c("127.0.0.1:3 6", 6)}, View{}, ErrNoLeader},
		{"version is not the key's", []Candidate{c("127.0.0.1:1 4", 5)}, View{}, ErrBadView},
		{"garbage", []Candidate{c("xyz", 1)}, View{}, ErrBadView},
	} {
		got, err := Leader(tc.cands)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("%s: Leader = %+v, %v; want %+v, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in      string
		eps     []string
		cluster string
		ok      bool
	}{
		{"etcd://127.0.0.1:2379", []string{"127.0.0.1:2379"}, DefaultCluster, true},
		{"etcd://h1:2379;h2:2379", []string{"h1:2379", "h2:2379"}, DefaultCluster, true},
		{"etcd://h1:2379,h2:2379/prod", []string{"h1:2379", "h2:2379"}, "prod", true},
		{"etcd://h1:2379;/c", []string{"h1:2379"}, "c", true},
		{"etcd://", nil, "", false},
		{"etcd://h1", nil, "", false},
		{"etcd://h1:x", nil, "", false},
		{"etcd://h1:2379/a/b", nil, "", false},
		{"127.0.0.1:50051", nil, "", false},
	} {
		got, err := ParseTarget(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseTarget(%q) err = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if !tc.ok {
			if !errors.Is(err, ErrBadTarget) {
				t.Errorf("ParseTarget(%q) = %v, want ErrBadTarget", tc.in, err)
			}
			continue
		}
		if got.Cluster != tc.cluster || len(got.Endpoints) != len(tc.eps) {
			t.Fatalf("ParseTarget(%q) = %+v", tc.in, got)
		}
		for i := range tc.eps {
			if got.Endpoints[i] != tc.eps[i] {
				t.Fatalf("ParseTarget(%q) = %+v", tc.in, got)
			}
		}
		if back, err := ParseTarget(got.String()); err != nil || back.String() != got.String() {
			t.Errorf("round trip %q -> %q: %v", tc.in, got.String(), err)
		}
	}
	if IsHA("127.0.0.1:50051") || !IsHA("etcd://x:1") {
		t.Fatal("IsHA")
	}
	if Key("") != "mooncake-store/mooncake_cluster/master_view" || Key("c1") != "mooncake-store/c1/master_view" {
		t.Fatalf("Key: %q %q", Key(""), Key("c1"))
	}
}

// FuzzParseView: values read from etcd come from the network; any bytes
// give a view that round-trips or an error, never a panic.
func FuzzParseView(f *testing.F) {
	for _, s := range []string{"127.0.0.1:50051 7", "", " ", "a:1 1", "[::1]:1 9223372036854775807", "x 1", "1:1 -1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseView(b)
		if err != nil {
			return
		}
		if v.Version <= 0 || v.Addr == "" {
			t.Fatalf("accepted %q as %+v", b, v)
		}
		back, err := ParseView([]byte(v.String()))
		if err != nil || back != v {
			t.Fatalf("round trip of %+v: %+v, %v", v, back, err)
		}
		_, _ = Leader([]Candidate{{Value: b, CreateRevision: v.Version}})
	})
}

// FuzzParseTarget: addresses come from flags and the environment.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"etcd://h1:2379;h2:2379", "etcd://a:1/c", "etcd://", "etcd://;;", "etcd://[::1]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			return
		}
		if len(tg.Endpoints) == 0 || tg.Cluster == "" {
			t.Fatalf("accepted %q as %+v", s, tg)
		}
		back, err := ParseTarget(tg.String())
		if err != nil || back.String() != tg.String() {
			t.Fatalf("round trip %q: %v", s, err)
		}
	})
}
