package transfer

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv("TRANSFER_TEST_PEER") != "" {
		os.Exit(runPeerProcess())
	}
	goleak.VerifyTestMain(m)
}

// runPeerProcess is a target engine in its own process: it registers a
// buffer, prints "<segment> <addr> <len>" and serves until stdin closes.
func runPeerProcess() int {
	size, _ := strconv.Atoi(os.Getenv("TRANSFER_TEST_PEER"))
	if lib := os.Getenv("TRANSFER_TEST_CUDA"); lib != "" {
		return runDevicePeerProcess(size, lib)
	}
	e, err := Open(context.Background(), Config{Transport: os.Getenv("TRANSFER_TEST_TRANSPORT")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	buf, err := e.AllocateManaged(size)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s %d %d\n", e.Name(), AddrOf(buf), len(buf))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = e.Close()
	return 0
}

type peerProc struct {
	cmd  *exec.Cmd
	name string
	addr uint64
	size int
}

// startPeer starts a target engine process (this test binary re-executed).
func startPeer(t *testing.T, size int, transport string) *peerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TRANSFER_TEST_PEER="+strconv.Itoa(size), "TRANSFER_TEST_TRANSPORT="+transport)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	var l string
	select {
	case l = <-line:
	case <-time.After(30 * time.Second):
		t.Fatal("peer process did not report its address")
	}
	f := strings.Fields(l)
	if len(f) != 3 {
		t.Fatalf("peer said %q", l)
	}
	addr, _ := strconv.ParseUint(f[1], 10, 64)
	n, _ := strconv.Atoi(f[2])
	return &peerProc{cmd: cmd, name: f[0], addr: addr, size: n}
}
