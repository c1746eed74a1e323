// Package gobinding holds the end-to-end test of the Go binding with
// Mooncake's API (binding/go, module
// github.com/kvcache-ai/Mooncake/mooncake-store/go, package mooncakestore).
// The binding is its own Go module (so programs written against Mooncake's
// binding build with a replace directive), which `go test ./...` of this
// module does not reach; TestGoBinding starts a real master and storage node
// (the mooncake binary) and runs, against them:
//
//   - the binding's own tests (binding/go/mooncakestore), over every call;
//   - Mooncake's tests/integration_test.go and examples/basic, unchanged,
//     from a fetched copy of Mooncake's repository (a checkout or a bare git
//     directory named by $MOONCAKE_REPO), in a temporary module whose go.mod
//     only requires Mooncake's module and replaces it (and this project's
//     module) with local paths. Without a copy that part is skipped with the
//     reason. Mooncake's integration test dials the master at
//     localhost:50051, so that part also needs that port free.
//
// The test package has no code of its own; this file is its manual.
package gobinding
