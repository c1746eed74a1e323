// Package storepb holds the protobuf messages and gRPC stubs of the store
// master's RPC: MasterService (store.proto) and MasterTasks (tasks.proto:
// replica clear, copy and move tasks). The generated files are committed so that
// building needs no protoc; regenerate with `go generate ./internal/storepb`
// (needs protoc, protoc-gen-go, protoc-gen-go-grpc and protoc-gen-go-vtproto,
// github.com/planetscale/vtprotobuf, on PATH). The *_vtproto.pb.go files are
// vtprotobuf's reflection-free codecs of the same messages (Marshal,
// Unmarshal), used on the fastrpc hot path.
package storepb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative store.proto tasks.proto
//go:generate protoc --go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+unmarshal_unsafe+size store.proto
