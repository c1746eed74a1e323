// Package syncbuf is a bytes.Buffer that several goroutines may write while
// another reads: the sink of a logger or a progress bar that a test reads
// while the code under test still writes.
//
//	var logs syncbuf.Buffer
//	log := slog.New(slog.NewTextHandler(&logs, nil))
//	...
//	waitfor.Cond(t, 5*time.Second, "dropped", func() bool { return strings.Contains(logs.String(), "dropped") })
//
// The zero Buffer is empty and ready to use; it must not be copied after
// first use.
package syncbuf
