package masterserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
)

func TestBearerOK(t *testing.T) {
	for _, c := range []struct {
		header string
		ok     bool
	}{
		{"Bearer s3cret", true}, {"Bearer s3cre", false}, {"Bearer s3cret2", false}, {"bearer s3cret", false},
		{"s3cret", false}, {"", false}, {"Bearer ", false},
	} {
		if got := BearerOK(c.header, "s3cret"); got != c.ok {
			t.Errorf("BearerOK(%q) = %v", c.header, got)
		}
	}
}

// TestSecretGuardsMutatingCalls: with a secret, remove all, remove by regex
// and unmount need "authorization: Bearer <secret>" (gRPC Unauthenticated
// otherwise), reads and ordinary calls stay open, and the admin HTTP API
// answers its non-GET requests 401 in the OpenAI error shape.
func TestSecretGuardsMutatingCalls(t *testing.T) {
	s, c := startTestServer(t, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	with := func(secret string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secret)
	}
	seg := &pb.Segment{Name: "seg", Endpoint: "ep", Base: 1 << 30, Size: 1 << 20}
	if st, err := c.MountSegment(ctx, &pb.MountSegmentRequest{ClientId: "c1", Segment: seg}); err != nil || st.Code != 0 {
		t.Fatalf("mount without secret (open): %v %v", st, err)
	}
	for name, call := range map[string]func(context.Context) error{
		"RemoveAll": func(ctx context.Context) error {
			_, err := c.RemoveAll(ctx, &pb.RemoveAllRequest{})
			return err
		},
		"RemoveByRegex": func(ctx context.Context) error {
			_, err := c.RemoveByRegex(ctx, &pb.RemoveByRegexRequest{Pattern: ".*"})
			return err
		},
	} {
		for _, cx := range []context.Context{ctx, with("wrong")} {
			err := call(cx)
			if grpcstatus.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), name+" needs the cluster secret") {
				t.Fatalf("%s without the secret: %v", name, err)
			}
		}
		if err := call(with("s3cret")); err != nil {
			t.Fatalf("%s with the secret: %v", name, err)
		}
	}
	// Reads and data-path calls stay open.
	if _, err := c.List(ctx, &pb.ListRequest{Limit: 10}); err != nil {
		t.Fatalf("list: %v", err)
	}
	if _, err := c.Exist(ctx, &pb.KeyRequest{Key: "k"}); err != nil {
		t.Fatalf("exist: %v", err)
	}
	if _, err := c.UnmountSegment(ctx, &pb.UnmountSegmentRequest{ClientId: "c1", Name: "seg"}); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Fatalf("unmount without the secret: %v", err)
	}
	if _, err := s.Core().Segment("seg"); err != nil {
		t.Fatalf("refused unmount unmounted: %v", err)
	}
	if st, err := c.UnmountSegment(with("s3cret"), &pb.UnmountSegmentRequest{ClientId: "c1", Name: "seg"}); err != nil || st.Code != 0 {
		t.Fatalf("unmount with the secret: %v %v", st, err)
	}

	base := "http://" + s.HTTPAddr()
	get, err := http.Get(base + "/get_all_segments")
	if err != nil {
		t.Fatal(err)
	}
	get.Body.Close()
	if get.StatusCode != 200 {
		t.Fatalf("GET stays open: %d", get.StatusCode)
	}
	for _, auth := range []string{"", "Bearer wrong"} {
		req, _ := http.NewRequest(http.MethodDelete, base+"/query_key?key=k", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]map[string]any
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		e := body["error"]
		if resp.StatusCode != 401 || err != nil || len(e) != 4 || e["type"] != "authentication_error" || e["code"] != float64(401) {
			t.Fatalf("DELETE with %q: %d %v %v", auth, resp.StatusCode, body, err)
		}
	}
	req, _ := http.NewRequest(http.MethodDelete, base+"/query_key?key=k", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 401 { // past the guard: the admin API itself answers (no DELETE route)
		t.Fatalf("DELETE with the secret: %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestNoSecretLeavesCallsOpen: without a secret nothing is guarded.
func TestNoSecretLeavesCallsOpen(t *testing.T) {
	_, c := startTestServer(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := c.RemoveAll(ctx, &pb.RemoveAllRequest{}); err != nil || r.Status.GetCode() != 0 {
		t.Fatalf("remove all: %v %v", r, err)
	}
}

// TestAuthnMemo: the token resolved last is answered from memory only
// under the policy that resolved it and until it expires: a token rotated
// out by a reload, or past its expiry, is refused at once, and another
// tenant's token is resolved as its own.
func TestAuthnMemo(t *testing.T) {
	clk := newFakeClock()
	exp := clk.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	policy := []byte("version: 1\ntenants: [{name: a, tokens: [{token: token-of-a-1234, expires: \"" + exp + "\"}]}, {name: b, tokens: [{token: token-of-b-1234}]}]")
	src, err := tenant.NewSource(context.Background(), tenant.SourceConfig{Load: func(context.Context) ([]byte, error) { return policy, nil }})
	if err != nil {
		t.Fatal(err)
	}
	a := &authn{secret: "cluster-secret-1", src: src, now: clk.Now}
	for range 3 {
		if tn, _, err := a.resolve("token-of-a-1234", "", nil); err != nil || tn.Name != "a" {
			t.Fatalf("a: %v %v", tn, err)
		}
	}
	if tn, _, err := a.resolve("token-of-b-1234", "", nil); err != nil || tn.Name != "b" {
		t.Fatalf("b after a: %v %v", tn, err)
	}
	if tn, _, err := a.resolve("token-of-b-9999", "", nil); err == nil {
		t.Fatalf("an unknown token after b's resolved to %v", tn)
	}
	if tn, _, err := a.resolve("cluster-secret-1", "", nil); err != nil || !tn.Admin {
		t.Fatalf("secret: %v %v", tn, err)
	}
	// Expiry: a's token, remembered, stops at its expiry.
	if _, _, err := a.resolve("token-of-a-1234", "", nil); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if tn, _, err := a.resolve("token-of-a-1234", "", nil); !errors.Is(err, tenant.ErrUnauthenticated) {
		t.Fatalf("expired token: %v %v", tn, err)
	}
	// Rotation: b's token, remembered, is refused once a policy without
	// it is in force.
	if _, _, err := a.resolve("token-of-b-1234", "", nil); err != nil {
		t.Fatal(err)
	}
	policy = []byte("version: 1\ntenants: [{name: b, tokens: [{token: token-of-b-5678}]}]")
	if changed, err := src.Reload(context.Background()); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if tn, _, err := a.resolve("token-of-b-1234", "", nil); !errors.Is(err, tenant.ErrUnauthenticated) {
		t.Fatalf("rotated-out token: %v %v", tn, err)
	}
	if tn, _, err := a.resolve("token-of-b-5678", "", nil); err != nil || tn.Name != "b" {
		t.Fatalf("new token: %v %v", tn, err)
	}
}
