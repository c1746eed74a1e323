// Package progress draws a one-line progress bar for the long runs of the
// command line (`mooncake bench ...`, `mooncake model init`), on a terminal
// only: New returns nil unless its writer is a terminal, and every method
// of a nil *Bar does nothing, so callers write
//
//	bar := progress.New(cmd.ErrOrStderr(), "model init", 3)
//	defer bar.Done()
//	bar.Set(1)
//
// without checking, and output piped to a file or parsed as JSON never
// carries a bar. A bar redraws at most every 100 ms ("\r" and an erase of
// the line); Done erases it. Timed runs a bar for work whose only known
// measure is time (a benchmark with a --duration, or none: then the bar
// shows the elapsed time). Writer wraps the stream the program prints its
// results on, erasing the bar before each write so the two never mix on
// one line.
package progress
