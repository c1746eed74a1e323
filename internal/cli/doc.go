// Package cli holds the subcommands of the mooncake binary. It is the only
// place that reads flags and environment variables; every subcommand builds a
// component's Config from them, validates it, and runs the component until the
// context (cancelled on SIGINT/SIGTERM) ends. Subcommands return errors; only
// cmd/mooncake turns them into an exit code. The subcommands are listed in
// commands.go; benchmark engines live in internal/bench/..., this package only
// parses their flags and prints their results. Besides the roles (serve, up,
// proxy, master, store, metadata-server) it has Mooncake's standalone `client`
// that serves setup_dummy clients (internal/dummyclient) and the store's
// command-line client (put, get, ls, rm, stat), `status` (a summary of a
// running cluster read from the master's and the proxy's GET /api/summary,
// the dashboards' data, plus /role and /leader under --ha) and `version` (also `--version`: the build
// info of runtime/debug, or the Version variable set with -ldflags).
//
// Exit codes: 0 success, 1 failure, 2 bad usage. Run makes every usage error
// of the tree exit 2 (usageExits2: flag errors, argument counts, unknown
// subcommands); a subcommand returns *ExitError for any other code. The
// bench subcommands and model init draw a progress bar on stderr when it is
// a terminal and --json is off (internal/progress).
package cli
