package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
)

// ExitError carries a specific process exit code out of a subcommand.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Run executes the mooncake command line with args and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0, nil
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code, ee.Err
	}
	return 1, err
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "mooncake",
		Short:         "Mooncake in Go: KVCache-centric disaggregated LLM serving",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Each subcommand lives in its own file of this package.
	root.AddCommand(
		newBenchCmd(),
	)
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	return root
}

func newBenchCmd() *cobra.Command {
	bench := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that report figures as ratios to this machine's limits",
	}
	for _, add := range benchCommands {
		bench.AddCommand(add())
	}
	return bench
}

// cmdLogger is a text logger on cmd's stderr, at debug level when verbose.
func cmdLogger(cmd *cobra.Command, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
}
