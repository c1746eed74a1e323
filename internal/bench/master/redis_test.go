package master

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// respOf is a respConn reading the given server bytes and writing to w.
func respOf(in string, w *bytes.Buffer) *respConn {
	return &respConn{r: bufio.NewReader(strings.NewReader(in)), w: bufio.NewWriter(w)}
}

// TestRESPRead decodes each kind of reply the bench meets.
func TestRESPRead(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		null, err      bool
	}{
		{name: "status", in: "+OK\r\n", want: "OK"},
		{name: "integer", in: ":42\r\n", want: "42"},
		{name: "bulk", in: "$5\r\nhello\r\n", want: "hello"},
		{name: "empty bulk", in: "$0\r\n\r\n", want: ""},
		{name: "null bulk", in: "$-1\r\n", null: true},
		{name: "error", in: "-ERR wrong\r\n", err: true},
		{name: "short bulk", in: "$5\r\nhel", err: true},
		{name: "bad length", in: "$x\r\n", err: true},
		{name: "huge bulk", in: "$999999999999\r\n", err: true},
		{name: "unknown type", in: "?1\r\n", err: true},
		{name: "short line", in: "+\n", err: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := respOf(c.in, &bytes.Buffer{}).read()
			switch {
			case c.err:
				if err == nil {
					t.Fatalf("read %q = %q, want an error", c.in, got)
				}
			case err != nil:
				t.Fatalf("read %q: %v", c.in, err)
			case c.null != (got == nil):
				t.Fatalf("read %q = %v, null %v", c.in, got, c.null)
			case string(got) != c.want:
				t.Fatalf("read %q = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// TestRESPWriteAndScan checks the encoding of SET and a two-page SCAN.
func TestRESPWriteAndScan(t *testing.T) {
	var w bytes.Buffer
	r := respOf("+OK\r\n+OK\r\n", &w)
	if err := r.setPipelined([][]byte{[]byte("a"), []byte("bc")}, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if want := "*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nv\r\n*3\r\n$3\r\nSET\r\n$2\r\nbc\r\n$1\r\nv\r\n"; w.String() != want {
		t.Fatalf("wrote %q, want %q", w.String(), want)
	}
	w.Reset()
	r = respOf("*2\r\n$2\r\n17\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n*2\r\n$1\r\n0\r\n*1\r\n$1\r\nc\r\n", &w)
	n, err := r.scanCount("obj/*", 10)
	if err != nil || n != 3 {
		t.Fatalf("scanCount = %d, %v; want 3", n, err)
	}
	if !strings.Contains(w.String(), "$4\r\nSCAN\r\n$2\r\n17\r\n") {
		t.Fatalf("second SCAN did not send the cursor: %q", w.String())
	}
	for _, bad := range []string{"$3\r\nbad\r\n", "*-1\r\n", "*2\r\n$1\r\n0\r\n*-1\r\n"} {
		if _, err := respOf(bad, &w).scanCount("*", 10); err == nil {
			t.Fatalf("scanCount accepted %q", bad)
		}
	}
}

// FuzzRESPRead feeds arbitrary server bytes to the reply decoder and the
// SCAN reader: they must return or fail, never panic or hang.
func FuzzRESPRead(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "$5\r\nhello\r\n", "$-1\r\n", "*2\r\n$1\r\n0\r\n*0\r\n", "*-1\r\n", "$-5\r\n", ":1\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		_, _ = respOf(in, &bytes.Buffer{}).read()
		_, _ = respOf(in, &bytes.Buffer{}).scanCount("*", 10)
	})
}
