package cli

import (
	"bufio"
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestReadRESP(t *testing.T) {
	tests := []struct {
		in      string
		want    any
		wantErr bool
	}{
		{"+OK\r\n", "OK", false},
		{":42\r\n", int64(42), false},
		{"$5\r\nhello\r\n", []byte("hello"), false},
		{"$0\r\n\r\n", []byte{}, false},
		{"$-1\r\n", nil, false},
		{"*2\r\n$1\r\na\r\n:1\r\n", []any{[]byte("a"), int64(1)}, false},
		{"-ERR wrong\r\n", errors.New("redis: ERR wrong"), false},
		{"$5\r\nhel\r\n", nil, true},              // truncated
		{"$99999999999\r\n", nil, true},           // too long
		{"$-2\r\n", nil, true},                    // bad length
		{"$3\r\nabcXY", nil, true},                // not terminated
		{"?x\r\n", nil, true},                     // unknown type
		{"+OK\n", nil, true},                      // bare LF
		{":x\r\n", nil, true},                     // bad integer
		{strings.Repeat("*1\r\n", 20), nil, true}, // too deep
	}
	for _, tc := range tests {
		got, err := readRESP(bufio.NewReader(strings.NewReader(tc.in)), 1<<20)
		if (err != nil) != tc.wantErr {
			t.Errorf("readRESP(%q) err=%v, wantErr=%v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !respEqual(got, tc.want) {
			t.Errorf("readRESP(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

func respEqual(a, b any) bool {
	switch x := a.(type) {
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !respEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case error:
		y, ok := b.(error)
		return ok && x.Error() == y.Error()
	}
	return a == b
}

// FuzzReadRESP: any reply bytes give a value or an error, never a panic or
// an allocation beyond the bulk limit.
func FuzzReadRESP(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "$5\r\nhello\r\n", "$-1\r\n", "*2\r\n$1\r\na\r\n:1\r\n", "-ERR x\r\n", ":-7\r\n", "*-1\r\n", "$1000000\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := readRESP(bufio.NewReader(bytes.NewReader(in)), 1<<16)
		if err == nil {
			if b, ok := v.([]byte); ok && len(b) > 1<<16 {
				t.Fatalf("bulk of %d bytes exceeds the limit", len(b))
			}
		}
	})
}

// TestBenchStoreSmoke runs the bench with the smallest configuration and
// checks that every phase produced figures without errors.
func TestBenchStoreSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	var out bytes.Buffer
	err := runBenchStore(t.Context(), &out, benchStoreConfig{sizes: []int{4096}, clients: []int{1, 2},
		segSize: 8 << 20, nodes: 2, duration: 30 * time.Millisecond, rounds: 1, redis: "auto", transport: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	rows := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 10 {
			rows[f[0]+" "+f[1]] = true
		}
	}
	for _, want := range []string{"mooncake put", "mooncake get", "mooncake get-into"} {
		if !rows[want] {
			t.Fatalf("bench output lacks a %q row:\n%s", want, text)
		}
	}
	for _, want := range []string{"memcpy", "segment utilisation before first eviction"} {
		if !strings.Contains(text, want) {
			t.Fatalf("bench output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "first error") {
		t.Fatalf("bench reported errors:\n%s", text)
	}
	if _, err := exec.LookPath("redis-server"); err == nil && !rows["redis get"] {
		t.Fatalf("redis installed but not benchmarked:\n%s", text)
	}
}
