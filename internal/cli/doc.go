// Package cli holds the subcommands of the mooncake binary. It is the only
// place that reads flags and environment variables; every subcommand builds a
// component's Config from them, validates it, and runs the component until the
// context (cancelled on SIGINT/SIGTERM) ends. Subcommands return errors; only
// cmd/mooncake turns them into an exit code.
package cli
