package cli

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestSecretOr(t *testing.T) {
	t.Setenv("MOONCAKE_SECRET", "from-env")
	if got := secretOr(""); got != "from-env" {
		t.Fatalf("env: %q", got)
	}
	if got := secretOr("flag"); got != "flag" {
		t.Fatalf("flag: %q", got)
	}
}

// TestSecretProcesses: a master started with --secret refuses rm --all from
// a client without it (exit 1, the reason on stderr) and accepts it with
// it; a storage node given the secret still unmounts gracefully on SIGTERM
// (its segment leaves at once, long before the client TTL).
func TestSecretProcesses(t *testing.T) {
	bin := buildBinary(t)
	m := startProc(t, bin, "master", "--port", "0", "--http-port", "0", "--client-ttl", "60s", "--secret", "s3cret")
	addr := m.waitLine(t, regexp.MustCompile(`grpc=(127\.0\.0\.1:\d+) http=(127\.0\.0\.1:\d+)`), 30*time.Second) // 127.0.0.1 by default
	grpcAddr, admin := addr[1], addr[2]
	n := startProc(t, bin, "store", "--master", grpcAddr, "--segment-size", "4MiB", "--secret", "s3cret", "--unmount-grace", "100ms")
	n.waitLine(t, regexp.MustCompile(`store node mounted`), 30*time.Second)
	mc := []string{"--master", grpcAddr}
	if out, e, code := run(t, bin, []byte("v"), append([]string{"put", "k", "-"}, mc...)...); code != 0 {
		t.Fatalf("put (open without the secret): %d %q %q", code, out, e)
	}
	if out, _, code := run(t, bin, nil, append([]string{"ls"}, mc...)...); code != 0 || !strings.Contains(out, "k") {
		t.Fatalf("ls (open): %d %q", code, out)
	}
	_, errOut, code := run(t, bin, nil, append([]string{"rm", "--all"}, mc...)...)
	if code != 1 || !strings.Contains(errOut, "unauthorized") || !strings.Contains(errOut, "RemoveAll needs the cluster secret") {
		t.Fatalf("rm --all without the secret: %d %q", code, errOut)
	}
	_, errOut, code = run(t, bin, nil, append([]string{"rm", "--regex", ".*", "--secret", "wrong"}, mc...)...)
	if code != 1 || !strings.Contains(errOut, "unauthorized") {
		t.Fatalf("rm --regex with a wrong secret: %d %q", code, errOut)
	}
	out, _, code := run(t, bin, nil, append([]string{"rm", "--all", "--secret", "s3cret"}, mc...)...)
	if code != 0 || !strings.Contains(out, "removed 1 object(s)") {
		t.Fatalf("rm --all with the secret: %d %q", code, out)
	}
	segments := func() string {
		resp, err := http.Get("http://" + admin + "/get_all_segments")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if !strings.Contains(segments(), `"name"`) {
		t.Fatalf("no segment mounted: %s", segments())
	}
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 15*time.Second, "the node's graceful unmount (client TTL is 60s)", func() bool { return segments() == "[]\n" })
	http.DefaultClient.CloseIdleConnections()
}
