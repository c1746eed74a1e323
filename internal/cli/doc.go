// Package cli holds the subcommands of the mooncake binary. It is the only
// place that reads flags and environment variables; every subcommand builds a
// component's Config from them, validates it, and runs the component until the
// context (cancelled on SIGINT/SIGTERM) ends. Subcommands return errors; only
// cmd/mooncake turns them into an exit code. The subcommands are listed in
// commands.go; benchmark engines live in internal/bench/..., this package only
// parses their flags and prints their results. Besides the roles (serve, up,
// proxy, master, store, metadata-server) it has Mooncake's standalone `client`
// that serves setup_dummy clients (internal/dummyclient) and the store's
// command-line client (put, get, ls, rm, stat).
package cli
