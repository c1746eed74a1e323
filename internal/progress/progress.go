package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/clock"
)

// IsTerminal reports whether w is a terminal (an *os.File, or anything with
// an Fd, whose descriptor is a tty).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Bar is one progress line on a terminal. The zero of its use is nil: see
// the package documentation.
type Bar struct {
	w     io.Writer
	label string
	total float64 // 0: unknown, show the elapsed time only
	clk   clock.Clock

	mu    sync.Mutex
	done  float64
	start time.Time
	last  time.Time // last draw
	drawn bool      // a bar is on the line now
}

// New returns a bar of total steps labelled label that draws on w, or nil
// when w is not a terminal. total 0 means unknown: the bar shows the
// elapsed time.
func New(w io.Writer, label string, total float64) *Bar {
	if !IsTerminal(w) {
		return nil
	}
	return newBar(w, label, total, nil)
}

func newBar(w io.Writer, label string, total float64, clk clock.Clock) *Bar {
	clk = clock.Or(clk)
	return &Bar{w: w, label: label, total: total, clk: clk, start: clk.Now()}
}

// Set records done steps and redraws when 100 ms passed since the last draw
// (or the bar is full).
func (b *Bar) Set(done float64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = done
	now := b.clk.Now()
	if b.drawn && now.Sub(b.last) < 100*time.Millisecond && (b.total == 0 || done < b.total) {
		return
	}
	b.last = now
	b.drawn = true
	_, _ = io.WriteString(b.w, "\r\033[K"+b.lineLocked(now))
}

// Add records n more steps.
func (b *Bar) Add(n float64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	d := b.done + n
	b.mu.Unlock()
	b.Set(d)
}

// Done erases the bar.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.eraseLocked()
}

func (b *Bar) eraseLocked() {
	if b.drawn {
		_, _ = io.WriteString(b.w, "\r\033[K")
		b.drawn = false
	}
}

// lineLocked renders "label [#####-----]  50%  1.2s" (or "label  1.2s"
// with an unknown total).
func (b *Bar) lineLocked(now time.Time) string {
	elapsed := now.Sub(b.start).Round(100 * time.Millisecond)
	if b.total <= 0 {
		return fmt.Sprintf("%s  %v", b.label, elapsed)
	}
	frac := min(max(b.done/b.total, 0), 1)
	const width = 30
	n := int(frac * width)
	return fmt.Sprintf("%s [%s%s] %3.0f%%  %v", b.label, strings.Repeat("#", n), strings.Repeat("-", width-n), frac*100, elapsed)
}

// Writer returns w wrapped so that each write first erases the bar (the
// next Set draws it again below); w itself when b is nil.
func (b *Bar) Writer(w io.Writer) io.Writer {
	if b == nil {
		return w
	}
	return writer{b, w}
}

type writer struct {
	b *Bar
	w io.Writer
}

func (x writer) Write(p []byte) (int, error) {
	x.b.mu.Lock()
	x.b.eraseLocked()
	x.b.mu.Unlock()
	return x.w.Write(p)
}

// Timed shows a bar on w (when it is a terminal) for work expected to take
// about expect (0: unknown, the elapsed time is shown), redrawn every 200 ms
// by a goroutine until stop, which erases it and returns once the goroutine
// has ended. The bar is returned for Writer; it is nil when w is not a
// terminal.
func Timed(w io.Writer, label string, expect time.Duration) (bar *Bar, stop func()) {
	b := New(w, label, expect.Seconds())
	if b == nil {
		return nil, func() {}
	}
	return b, b.tick(200 * time.Millisecond)
}

// tick redraws b with the elapsed seconds (at most 99% of the total: the
// work may outlast its estimate) every period until the returned stop.
func (b *Bar) tick(period time.Duration) (stop func()) {
	quit, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				el := b.clk.Now().Sub(b.start).Seconds()
				if b.total > 0 {
					el = min(el, 0.99*b.total)
				}
				b.Set(el)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-ended
			b.Done()
		})
	}
}
