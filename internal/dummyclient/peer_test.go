package dummyclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/store"
)

// nobody is the user the peer processes of these tests run as.
const nobody = 65534

// TestPeerHelper is the body of the peer processes the tests below start
// (as another user); it does nothing in a normal run.
func TestPeerHelper(t *testing.T) {
	addr := os.Getenv("DUMMY_PEER_ADDR")
	switch os.Getenv("DUMMY_PEER_ROLE") {
	case "dial":
		c, err := Dial(context.Background(), addr, 4096)
		if err != nil {
			fmt.Println("ERR:", err)
			os.Exit(0)
		}
		err = c.PutWith(context.Background(), "from-peer", []byte("v"), store.PutOptions{})
		fmt.Println("OK:", err)
		os.Exit(0)
	case "serve":
		srv, err := New(Config{Addr: addr, Store: &memStore{m: map[string][]byte{}}})
		if err != nil {
			fmt.Println("ERR:", err)
			os.Exit(1)
		}
		ln, err := srv.Listen()
		if err != nil {
			fmt.Println("ERR:", err)
			os.Exit(1)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }() // until the test closes stdin
		fmt.Println("READY")
		_ = srv.Serve(ctx, ln)
		os.Exit(0)
	}
}

// peerCmd runs this test binary's TestPeerHelper as user nobody in role.
func peerCmd(t *testing.T, role, addr string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a peer process as another user")
	}
	dir, err := os.MkdirTemp("", "dummypeer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "peer.test")
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^TestPeerHelper$")
	cmd.Env = append(os.Environ(), "DUMMY_PEER_ROLE="+role, "DUMMY_PEER_ADDR="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Dir = dir
	return cmd
}

// TestPeerUIDRealClient: a dummy of another user is refused by the real
// client (its request never reaches the store) unless that user is
// allowed.
func TestPeerUIDRealClient(t *testing.T) {
	ms, addr := start(t)
	out, err := peerCmd(t, "dial", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("peer: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ERR:") || !strings.Contains(string(out), "user not allowed") {
		t.Fatalf("a dummy of uid %d was served: %s", nobody, out)
	}
	ms.mu.Lock()
	_, ok := ms.m["from-peer"]
	ms.mu.Unlock()
	if ok {
		t.Fatal("the refused dummy's put reached the store")
	}

	ms2, addr2 := startWith(t, Config{AllowUIDs: []uint32{nobody}})
	out, err = peerCmd(t, "dial", addr2).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK: <nil>") {
		t.Fatalf("an allowed dummy: %v\n%s", err, out)
	}
	ms2.mu.Lock()
	_, ok = ms2.m["from-peer"]
	ms2.mu.Unlock()
	if !ok {
		t.Fatal("the allowed dummy's put did not reach the store")
	}
}

// TestPeerUIDDummy: a dummy does not talk to a "real client" of another
// user (one that bound the address's socket name first), unless
// $MOONCAKE_REAL_CLIENT_UIDS lists it.
func TestPeerUIDDummy(t *testing.T) {
	addr := "test-" + t.Name()
	cmd := peerCmd(t, "serve", addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "READY\n" {
		t.Fatalf("peer server: %q %v", line, err)
	}
	ctx := context.Background()
	if _, err := Dial(ctx, addr, 4096); !errors.Is(err, ErrPeerNotAllowed) {
		t.Fatalf("dial a real client of uid %d: %v, want ErrPeerNotAllowed", nobody, err)
	}
	t.Setenv(RealClientUIDsEnv, fmt.Sprint(nobody))
	c, err := Dial(ctx, addr, 4096)
	if err != nil {
		t.Fatalf("with %s: %v", RealClientUIDsEnv, err)
	}
	_ = c.Close()
}

func TestParseUIDs(t *testing.T) {
	if got, err := ParseUIDs(" 1000, 65534,,"); err != nil || len(got) != 2 || got[0] != 1000 || got[1] != 65534 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"x", "-1", "4294967296"} {
		if _, err := ParseUIDs(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}
