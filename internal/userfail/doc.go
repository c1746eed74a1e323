// Package userfail holds tests only: failures that Mooncake's users
// reported, each reproduced on the multi-host test bed (internal/testbed)
// with the real mooncake binary, and the behaviour this implementation
// shows instead. The other reports of that list are tested where the
// fault lives (store, transfer, internal/cli, internal/engine,
// internal/e2e); docs/operations.md has the table.
//
// The tests need root and network namespaces; without them they skip.
package userfail
