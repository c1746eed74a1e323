package benchproc

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

func TestField(t *testing.T) {
	line := "master grpc=127.0.0.1:5 http=127.0.0.1:6 ready"
	if got := Field(line, "grpc"); got != "127.0.0.1:5" {
		t.Fatalf("grpc=%q", got)
	}
	if got := Field(line, "gr"); got != "" {
		t.Fatalf("a prefix of a name matched: %q", got)
	}
}

func TestEnvDropsServerSettings(t *testing.T) {
	t.Setenv("MOONCAKE_SECRET", "s")
	t.Setenv("MOONCAKE_MASTER", "m:1")
	t.Setenv("BENCHPROC_KEEP", "1")
	env := Env()
	if slices.Contains(env, "MOONCAKE_SECRET=s") || slices.Contains(env, "MOONCAKE_MASTER=m:1") || !slices.Contains(env, "BENCHPROC_KEEP=1") {
		t.Fatalf("env %v", env)
	}
}

// TestStartRedis: a started redis-server accepts connections and is gone
// after Stop (skipped without redis-server, except under CI).
func TestStartRedis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := StartRedis(ctx)
	if errors.Is(err, ErrRedisServerMissing) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", r.Addr)
	if err != nil {
		r.Stop()
		t.Fatal(err)
	}
	c.Close()
	r.Stop()
	if c, err := net.DialTimeout("tcp", r.Addr, time.Second); err == nil {
		c.Close()
		t.Fatal("redis-server still listening after Stop")
	}
}
