package masterserver

import (
	"context"
	"encoding/json"
	"github.com/kvcache-go/mooncake/internal/master"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startTestServer runs a master (gRPC and admin HTTP on free loopback
// ports, secret as its --secret) and dials it, until the test ends.
func startTestServer(t *testing.T, secret string) (*Server, pb.MasterServiceClient) {
	t.Helper()
	s, err := Start(ServerConfig{Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		s.Close()
	})
	return s, pb.NewMasterServiceClient(conn)
}

func TestServerRPCAndAdmin(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last: after the server is closed
	s, c := startTestServer(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ping, err := c.Ping(ctx, &pb.PingRequest{ClientId: "n1"})
	if err != nil || !ping.NeedRemount {
		t.Fatalf("ping of unknown client: %v %v", ping, err)
	}
	st, err := c.MountSegment(ctx, &pb.MountSegmentRequest{ClientId: "n1", Segment: &pb.Segment{Name: "seg1", Endpoint: "127.0.0.1:1", Base: 1 << 20, Size: 1 << 20}})
	if err != nil || st.Code != 0 {
		t.Fatalf("mount: %v %v", st, err)
	}
	ps, err := c.PutStart(ctx, &pb.PutStartRequest{ClientId: "w", Key: "a/1", Size: 100, Config: &pb.ReplicateConfig{Replicas: 2}})
	if err != nil || ps.Status.Code != 0 || len(ps.Replicas) != 1 || ps.Replicas[0].Addr != 1<<20 {
		t.Fatalf("put start: %v %v", ps, err)
	}
	if r, err := c.PutCommit(ctx, &pb.PutCommitRequest{ClientId: "w", Key: "a/1", Crc32C: 77}); err != nil || r.Status.GetCode() != 0 {
		t.Fatalf("put commit: %v %v", r, err)
	}
	info, err := c.GetReplicaList(ctx, &pb.KeyRequest{Key: "a/1"})
	if err != nil || info.Crc32C != 77 || info.LeaseTtlMs != 10000 {
		t.Fatalf("get: %v %v", info, err)
	}
	if st, _ := c.Remove(ctx, &pb.RemoveRequest{Key: "a/1"}); st.Status.Code != master.CodeObjectHasLease {
		t.Fatalf("remove of leased: %v", st)
	}
	miss, _ := c.GetReplicaList(ctx, &pb.KeyRequest{Key: "nope"})
	if miss.Status.Code != master.CodeObjectNotFound {
		t.Fatalf("missing key: %v", miss)
	}
	for _, req := range []*pb.PutStartRequest{
		{ClientId: "w", Key: "", Size: 1},
		{ClientId: "w", Key: "k", Size: 0},
		{ClientId: "w", Key: "k", Size: 1, Config: &pb.ReplicateConfig{Replicas: -5}},
		{ClientId: "w", Key: "k", Size: 1, Config: &pb.ReplicateConfig{SoftPin: true, SoftPinTtlMs: 1 << 62}},
		{ClientId: "w", Key: "k", Size: 1, Config: &pb.ReplicateConfig{SoftPin: true, SoftPinTtlMs: -1}},
	} {
		if bad, _ := c.PutStart(ctx, req); bad.Status.Code != master.CodeInvalidParams {
			t.Fatalf("bad put %v: %v", req, bad)
		}
	}
	if st, _ := c.MountSegment(ctx, &pb.MountSegmentRequest{ClientId: "n2"}); st.Code != master.CodeInvalidParams {
		t.Fatalf("mount without a segment: %v", st)
	}
	be, _ := c.BatchExist(ctx, &pb.BatchKeysRequest{Keys: []string{"nope", "a/1"}})
	if be.Results[0].Exists || !be.Results[1].Exists {
		t.Fatalf("batch exist order: %v", be)
	}
	ls, _ := c.List(ctx, &pb.ListRequest{Prefix: "a/"})
	if len(ls.Keys) != 1 || ls.Keys[0].Key != "a/1" {
		t.Fatalf("list: %v", ls)
	}
	if ls, _ := c.List(ctx, &pb.ListRequest{Limit: -1}); ls.Status.Code != master.CodeInvalidParams {
		t.Fatalf("negative limit: %v", ls)
	}

	get := func(path string) (int, string) {
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Get("http://" + s.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		path string
		code int
		want string
	}{
		{"/health", 200, "OK"},
		{"/metrics", 200, "mooncake_master_objects 1"},
		{"/metrics", 200, `mooncake_master_segment_used_bytes{segment="seg1"} 128`},
		{"/metrics", 200, "mooncake_master_lease_rejections_total 1"},
		{"/query_key?key=a/1", 200, `"crc32c":77`},
		{"/query_key?key=zz", 404, "not found"},
		{"/query_key", 400, "missing key"},
		{"/get_all_keys?limit=1", 200, `"key":"a/1"`},
		{"/get_all_keys?limit=x", 400, "limit"},
		{"/get_all_segments", 200, `"name":"seg1"`},
		{"/query_segment?segment=seg1", 200, `"used":128`},
		{"/query_segment?segment=none", 404, "not found"},
	}
	for _, tc := range tests {
		code, body := get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d %q, want %d containing %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	var page struct {
		Keys []struct{ Key string } `json:"keys"`
		Next string                 `json:"next"`
	}
	_, body := get("/get_all_keys")
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Keys) != 1 || page.Next != "" {
		t.Fatalf("get_all_keys: %s %v", body, err)
	}
}

func TestServerConfigValidate(t *testing.T) {
	if _, err := Start(ServerConfig{}); err == nil {
		t.Fatal("empty address accepted")
	}
	if _, err := Start(ServerConfig{Addr: "127.0.0.1:0", Core: master.Config{HighWatermark: 2}}); err == nil {
		t.Fatal("bad core config accepted")
	}
}

// TestServerRun: NewServer binds nothing; Run serves on the caller's
// listeners, drives Tick with the injected clock, and returns nil once its
// context ends, with the listeners closed and no goroutine left.
func TestServerRun(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	s, err := NewServer(ServerConfig{Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TickInterval: time.Millisecond,
		Core: master.Config{ClientTTL: time.Second}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != "" || s.HTTPAddr() != "" {
		t.Fatalf("NewServer bound %q %q", s.Addr(), s.HTTPAddr())
	}
	gl, hl, err := s.cfg.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx, gl, hl) }()

	resp, err := http.Get("http://" + hl.Addr().String() + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := s.Core().MountSegment("n1", master.SegmentSpec{Name: "seg1", Endpoint: "127.0.0.1:1", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second) // n1 is silent past its TTL: a Tick drops it
	waitfor.Cond(t, 10*time.Second, "a tick to drop the silent client", func() bool { return s.Core().Stats().Clients == 0 })

	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	if _, err := http.Get("http://" + hl.Addr().String() + "/health"); err == nil {
		t.Fatal("admin listener still open after Run returned")
	}
	http.DefaultClient.CloseIdleConnections()
	goleak.VerifyNone(t, ignore)
}
