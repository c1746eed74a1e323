// Command mooncake is the single binary of Mooncake in Go: every role (transfer
// bench, inference engine, proxy, store master and node, metadata server) is a
// subcommand. See README.md and docs/.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvcache-go/mooncake/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mooncake:", err)
	}
	os.Exit(code)
}
