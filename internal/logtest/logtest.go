// Package logtest is a slog.Handler for tests: it keeps the records a
// logger writes (at Min and above, INFO by default) so that a test can
// assert on what was logged.
package logtest

import (
	"context"
	"log/slog"
	"sync"
)

// Recorder keeps records; safe for concurrent use.
type Recorder struct {
	Min  slog.Level // lowest level kept (the zero value is INFO)
	mu   sync.Mutex
	recs []slog.Record
}

var _ slog.Handler = (*Recorder)(nil)

// Enabled implements slog.Handler.
func (r *Recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.Min }

// Handle implements slog.Handler.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// WithAttrs implements slog.Handler (the attributes are not kept).
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup implements slog.Handler (the group is not kept).
func (r *Recorder) WithGroup(string) slog.Handler { return r }

// Records returns a copy of the records kept so far.
func (r *Recorder) Records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}

// Find returns the attributes of the first record at level whose message
// is msg.
func (r *Recorder) Find(level slog.Level, msg string) (map[string]slog.Value, bool) {
	for _, rec := range r.Records() {
		if rec.Message != msg || rec.Level != level {
			continue
		}
		return Attrs(rec), true
	}
	return nil, false
}

// Messages lists the messages of the records, in order.
func (r *Recorder) Messages() []string {
	var out []string
	for _, rec := range r.Records() {
		out = append(out, rec.Message)
	}
	return out
}

// At lists the records at level as "message key=value ...".
func (r *Recorder) At(level slog.Level) []string {
	var out []string
	for _, rec := range r.Records() {
		if rec.Level == level {
			s := rec.Message
			rec.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
			out = append(out, s)
		}
	}
	return out
}

// Attrs returns a record's attributes by key.
func Attrs(rec slog.Record) map[string]slog.Value {
	attrs := map[string]slog.Value{}
	rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
	return attrs
}
