package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/kvcache-go/mooncake/internal/syncbuf"
	"github.com/spf13/cobra"
)

// leafPaths lists the argument paths of every runnable command (["get"],
// ["bench", "pd"], ...).
func leafPaths(c *cobra.Command, prefix []string) [][]string {
	var out [][]string
	for _, sub := range c.Commands() {
		if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
			continue
		}
		p := append(append([]string(nil), prefix...), sub.Name())
		if sub.HasSubCommands() {
			out = append(out, leafPaths(sub, p)...)
		} else {
			out = append(out, p)
		}
	}
	return out
}

// TestUsageErrorsExit2 runs the binary: every command exits 2 on an unknown
// flag (docs/store.md: bad usage exits 2; a missing key exits 1), and so do
// a wrong number of arguments and an unknown subcommand.
func TestUsageErrorsExit2(t *testing.T) {
	bin := buildBinary(t)
	paths := leafPaths(newRootCmd(), nil)
	if len(paths) < 20 {
		t.Fatalf("only %d commands found: %v", len(paths), paths)
	}
	for _, p := range paths {
		_, errOut, code := run(t, bin, nil, append(p, "--no-such-flag")...)
		if code != 2 || !strings.Contains(errOut, "unknown flag: --no-such-flag") {
			t.Errorf("%v --no-such-flag: exit %d, stderr %q", p, code, errOut)
		}
	}
	for _, args := range [][]string{
		{"nosuch"}, {"bench", "nosuch"}, {"model", "nosuch"},
		{"get"}, {"stat", "a", "b"}, {"put", "k"}, {"master", "extra"}, {"version", "x"}, {"bench", "transfer", "extra"},
	} {
		_, errOut, code := run(t, bin, nil, args...)
		if code != 2 || !strings.Contains(errOut, "mooncake ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	// Bare group commands print their help and succeed.
	out, _, code := run(t, bin, nil, "bench")
	if code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("bench: exit %d, out %q", code, out)
	}
	for _, flag := range []string{"--version", "version"} {
		out, _, code := run(t, bin, nil, flag)
		if code != 0 || !regexp.MustCompile(`^mooncake \S+.* go1\.\d+`).MatchString(out) {
			t.Errorf("%s: exit %d, out %q", flag, code, out)
		}
	}
}

func TestFormatVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		override string
		bi       *debug.BuildInfo
		want     string
	}{
		{"", bi, "mooncake v0.3.0 (0123456789ab-dirty) go1.26.8"},
		{"v9.9.9", bi, "mooncake v9.9.9 (0123456789ab-dirty) go1.26.8"},
		{"", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "mooncake (devel) go1.26.8"},
	} {
		if got := formatVersion(c.override, c.bi); got != c.want {
			t.Errorf("formatVersion(%q) = %q, want %q", c.override, got, c.want)
		}
	}
	bi.Settings[1].Value = "false"
	if got := formatVersion("", bi); got != "mooncake v0.3.0 (0123456789ab) go1.26.8" {
		t.Errorf("clean tree: %q", got)
	}
}

func TestDisplayKey(t *testing.T) {
	for key, want := range map[string]string{
		"blob/1":         "blob/1",
		"with space":     "with space",
		"über":           "über",
		"a\nb":           `"a\nb"`,
		"tab\there":      `"tab\there"`,
		"esc\x1b[31mred": `"esc\x1b[31mred"`,
		"bad\xffutf8":    `"bad\xffutf8"`,
		`"quoted"`:       `"\"quoted\""`,
		"":               `""`,
	} {
		if got := displayKey(key); got != want {
			t.Errorf("displayKey(%q) = %s, want %s", key, got, want)
		}
	}
}

// TestDefaultModelsAgree: up, serve and model init default to the same
// built-in model (the README's `make run` curl names it).
func TestDefaultModelsAgree(t *testing.T) {
	up := newUpCmd().Flags().Lookup("model").DefValue
	serve := newServeCmd().Flags().Lookup("model").DefValue
	var initCfg string
	for _, c := range newModelCmd().Commands() {
		if c.Name() == "init" {
			initCfg = c.Flags().Lookup("config").DefValue
		}
	}
	if up != serve || serve != initCfg {
		t.Fatalf("default models: up %q, serve %q, model init %q", up, serve, initCfg)
	}
}

// TestMetadataServerVerbose: metadata-server takes -v like the other roles
// and then logs each write at debug level.
func TestMetadataServerVerbose(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, []string{"metadata-server", "--port", "0", "-v"}, pw, &stderr)
		pw.Close()
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metadata-server: %v", err)
		}
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url := regexp.MustCompile(`http://\S+`).FindString(line)
	req, _ := http.NewRequest(http.MethodPut, url+"?key=k1", strings.NewReader(`{"a":1}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if !strings.Contains(stderr.String(), "metadata put") || !strings.Contains(stderr.String(), "key=k1") {
		t.Fatalf("no debug line for the put: %q", stderr.String())
	}
}
