package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Skipf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("open pts: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// TestBenchProgressOnlyOnATerminal runs the binary: with stderr on a
// terminal a bench draws its bar there (and erases it), with stderr piped
// or with --json it draws nothing, and stdout stays clean JSON.
func TestBenchProgressOnlyOnATerminal(t *testing.T) {
	bin := buildBinary(t)
	args := []string{"bench", "transfer", "--transport", "inproc", "--block-size", "64KiB", "--batch-size", "2", "--threads", "1", "--duration", "700ms"}

	ptm, pts := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close() // the child holds its copy; EOF (EIO) on ptm once it exits
	term := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(ptm)
		term <- string(b)
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bench on a terminal: %v", err)
	}
	var onTerm string
	select {
	case onTerm = <-term:
	case <-time.After(10 * time.Second):
		t.Fatal("terminal not closed")
	}
	if !strings.Contains(onTerm, "mooncake bench transfer [") || !strings.HasSuffix(onTerm, "\r\033[K") {
		t.Fatalf("terminal got %q", onTerm)
	}
	if strings.Contains(stdout.String(), "\033[") || !strings.Contains(stdout.String(), "GB/s") {
		t.Fatalf("stdout %q", stdout.String())
	}

	// Piped stderr: no bar.
	out, errOut, code := run(t, bin, nil, args...)
	if code != 0 || strings.Contains(errOut, "\033[") || strings.Contains(errOut, "[###") || strings.Contains(out, "\033[") {
		t.Fatalf("piped: exit %d stdout %q stderr %q", code, out, errOut)
	}

	// --json on a terminal: no bar, one JSON object on stdout.
	ptm2, pts2 := openPTY(t)
	cmd = exec.CommandContext(ctx, bin, append(args, "--json")...)
	stdout.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, pts2
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts2.Close()
	go func() {
		b, _ := io.ReadAll(ptm2)
		term <- string(b)
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bench --json: %v", err)
	}
	if s := <-term; strings.Contains(s, "[###") || strings.Contains(s, "\033[") {
		t.Fatalf("--json drew a bar: %q", s)
	}
	var v map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil {
		t.Fatalf("--json stdout %q: %v", stdout.String(), err)
	}
}
