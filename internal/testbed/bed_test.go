package testbed_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

func get(url string, d time.Duration) error {
	c := http.Client{Timeout: d}
	resp, err := c.Get(url)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// One bed, every fault once: hosts have their own hostname and address,
// partition/heal, isolate/rejoin, freeze/thaw, bandwidth, delay link,
// and cleanup leaves no namespace.
func TestBedFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := testbed.Binary(t)
	bed := testbed.ForTest(t, 3, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h1, h2, h3 := bed.Host(0), bed.Host(1), bed.Host(2)
	m, err := h1.StartMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := h2.StartStore(ctx, m.GRPC, "8MiB", "--ping-interval", "100ms")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.GRPC, h1.Addr+":") || !strings.HasPrefix(s.HTTP, h2.Addr+":") {
		t.Fatalf("addresses: master %s store %s", m.GRPC, s.HTTP)
	}
	for _, p := range []*testbed.Proc{m.Proc, s.Proc} {
		out, err := exec.Command("nsenter", "-t", strconv.Itoa(p.PID()), "-u", "hostname").Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != p.Host.Name {
			t.Fatalf("pid %d hostname %q, want %q", p.PID(), got, p.Host.Name)
		}
	}
	if err := h3.Reach(ctx, m.GRPC); err != nil {
		t.Fatalf("h3 -> master: %v", err)
	}
	if err := bed.Partition(ctx, h1, h3); err != nil {
		t.Fatal(err)
	}
	if err := h3.Reach(ctx, m.GRPC); err == nil {
		t.Fatal("h3 reaches the master across a partition")
	}
	if err := h2.Reach(ctx, m.GRPC); err != nil {
		t.Fatalf("h2 -> master during h1|h3: %v", err)
	}
	if err := bed.Heal(ctx, h1, h3); err != nil {
		t.Fatal(err)
	}
	if err := h3.Reach(ctx, m.GRPC); err != nil {
		t.Fatalf("after heal: %v", err)
	}

	health := "http://" + s.HTTP + "/health"
	if err := get(health, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := h2.Isolate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := get(health, 300*time.Millisecond); err == nil {
		t.Fatal("isolated host answered")
	}
	if err := h2.Rejoin(ctx); err != nil {
		t.Fatal(err)
	}
	if err := get(health, 2*time.Second); err != nil {
		t.Fatalf("after rejoin: %v", err)
	}
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := get(health, 300*time.Millisecond); err == nil {
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(s.PID()) + "/status")
		t.Fatalf("frozen process answered: %.200s", st)
	}
	s.Thaw()
	if err := get(health, 2*time.Second); err != nil {
		t.Fatalf("after thaw: %v", err)
	}

	if err := h2.LimitBandwidth(ctx, "10mbit"); err != nil {
		t.Fatal(err)
	}
	if err := get(health, 2*time.Second); err != nil {
		t.Fatalf("under a bandwidth limit: %v", err)
	}
	if err := h2.LimitBandwidth(ctx, ""); err != nil {
		t.Fatal(err)
	}

	link, err := bed.Forward(s.HTTP, 100*time.Millisecond, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := get("http://"+link.Addr()+"/health", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("round trip through a 100ms link took %v", d)
	}

	s.Kill()
	if !s.Exited() {
		t.Fatal("killed process still running")
	}
	if err := bed.Close(); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, h := range bed.Hosts() {
		if strings.Contains(string(out), h.NS) {
			t.Fatalf("namespace %s left after Close", h.NS)
		}
	}
}
