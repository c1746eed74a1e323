package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

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
	usageExits2(root)
	root.SetArgs(args)
	stopProfile, err := profileFromEnv(os.Getenv(cpuProfileEnv), args)
	if err != nil {
		return 2, err
	}
	defer stopProfile()
	root.SetOut(stdout)
	root.SetErr(stderr)
	err = root.ExecuteContext(ctx)
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
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// Each subcommand lives in its own file of this package.
	root.AddCommand(
		newBenchCmd(),
	)
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	root.AddCommand(newVersionCmd())
	return root
}

func newBenchCmd() *cobra.Command {
	bench := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that report figures as ratios to this machine's limits",
	}
	for _, add := range benchCommands {
		sub := add()
		withBenchProgress(sub)
		bench.AddCommand(sub)
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

// usageExits2 makes every usage error of the command tree exit 2 (docs/store.md):
// a bad or unknown flag, a wrong number of arguments, and an unknown
// subcommand. Commands that only group subcommands (root, bench, model) print
// their help when run bare and reject anything else as an unknown command.
func usageExits2(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &ExitError{Code: 2, Err: fmt.Errorf("%s: %w (see %s --help)", cmd.CommandPath(), err, cmd.CommandPath())}
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Run == nil && c.RunE == nil && c.HasSubCommands() {
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
			c.Args = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return fmt.Errorf("unknown command %q (see %s --help)", args[0], cmd.CommandPath())
				}
				return nil
			}
		}
		if c.Args == nil && c.Runnable() {
			c.Args = cobra.NoArgs
		}
		if check := c.Args; check != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("%s: %w", cmd.CommandPath(), err)}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
