// Package storepb holds the protobuf messages and gRPC stubs of the store
// master's RPC: MasterService (store.proto) and MasterTasks (tasks.proto:
// replica clear, copy and move tasks). The generated files are committed so that
// building needs no protoc; regenerate with `go generate ./internal/storepb`
// (needs protoc, protoc-gen-go and protoc-gen-go-grpc on PATH).
package storepb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative store.proto tasks.proto
//go:generate protoc --go_out=. --go_opt=paths=source_relative store_fast.proto
