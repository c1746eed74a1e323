package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/syncbuf"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNotATerminalDrawsNothing(t *testing.T) {
	var buf bytes.Buffer
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, w := range []interface{ Write([]byte) (int, error) }{&buf, f} {
		if IsTerminal(w) {
			t.Fatalf("%T is a terminal", w)
		}
		b := New(w, "x", 10)
		if b != nil {
			t.Fatalf("New on %T returned a bar", w)
		}
		b.Set(3) // nil bar: no-ops
		b.Add(1)
		b.Done()
		if b.Writer(w) != w {
			t.Fatal("nil bar wrapped the writer")
		}
		_, stop := Timed(w, "x", time.Second)
		stop()
	}
	if buf.Len() != 0 {
		t.Fatalf("wrote %q", buf.String())
	}
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Fatalf("wrote %d bytes to a file", st.Size())
	}
}

func TestBarDrawsThrottlesAndErases(t *testing.T) {
	var buf bytes.Buffer
	clk := clock.NewFake(time.Unix(0, 0))
	b := newBar(&buf, "model init", 4, clk)
	b.Set(1)
	if got := buf.String(); got != "\r\033[Kmodel init [#######-----------------------]  25%  0s" {
		t.Fatalf("first draw %q", got)
	}
	buf.Reset()
	clk.Advance(50 * time.Millisecond)
	b.Add(1) // within 100 ms: not drawn
	if buf.Len() != 0 {
		t.Fatalf("drew within 100ms: %q", buf.String())
	}
	clk.Advance(time.Second)
	b.Add(2) // full: drawn
	if got := buf.String(); !strings.Contains(got, "[##############################] 100%  1.1s") {
		t.Fatalf("full bar %q", got)
	}
	buf.Reset()
	var out bytes.Buffer
	if _, err := b.Writer(&out).Write([]byte("result\n")); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "\r\033[K" || out.String() != "result\n" {
		t.Fatalf("write did not erase the bar first: bar %q out %q", buf.String(), out.String())
	}
	buf.Reset()
	b.Done() // already erased: nothing more
	if buf.Len() != 0 {
		t.Fatalf("second erase %q", buf.String())
	}
	unknown := newBar(&buf, "bench pd", 0, clk)
	clk.Advance(2500 * time.Millisecond)
	unknown.Set(2.5)
	if got := buf.String(); got != "\r\033[Kbench pd  2.5s" {
		t.Fatalf("unknown total %q", got)
	}
}

func TestTickRedrawsUntilStop(t *testing.T) {
	var buf syncbuf.Buffer
	b := newBar(&buf, "bench transfer", 3600, nil)
	stop := b.tick(5 * time.Millisecond)
	waitfor.Cond(t, 10*time.Second, "two redraws", func() bool { return strings.Count(buf.String(), "bench transfer [") >= 2 })
	stop()
	stop() // idempotent
	if got := buf.String(); !strings.HasSuffix(got, "\r\033[K") {
		t.Fatalf("stop did not erase the bar: %q", got)
	}
}
