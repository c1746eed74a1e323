package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/progress"
)

// withBenchProgress wraps a bench subcommand so that it shows a progress bar
// on stderr while it runs, when stderr is a terminal and --json is off (the
// bar never reaches a pipe, a file or JSON output). A --duration flag sets
// the expected length (the elapsed time alone is shown otherwise); the
// results printed on stdout meanwhile erase the bar first.
func withBenchProgress(c *cobra.Command) {
	run := c.RunE
	if run == nil {
		return
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		f := cmd.Flags()
		if asJSON, err := f.GetBool("json"); err == nil && asJSON {
			return run(cmd, args)
		}
		if mode, err := f.GetString("mode"); err == nil && mode == "target" { // serves until stopped
			return run(cmd, args)
		}
		var expect time.Duration
		if d, err := f.GetDuration("duration"); err == nil && cmd.Name() != "store" && cmd.Name() != "store-durable" { // per phase there
			expect = d
		}
		bar, stop := progress.Timed(cmd.ErrOrStderr(), cmd.CommandPath(), expect)
		defer stop()
		cmd.SetOut(bar.Writer(cmd.OutOrStdout()))
		return run(cmd, args)
	}
}
