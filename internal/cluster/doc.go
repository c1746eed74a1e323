// Package cluster starts engine instances and whole local P/D clusters in
// one process: StartInstance builds an engine, its OpenAI server, and (for
// the producer, consumer and both roles) a transfer engine and a Mooncake
// P/D connector, listening on 127.0.0.1 (port 0 picks free ports); Up starts
// prefill and decode instances and a proxy in front of them, and returns
// once the proxy has seen every instance healthy. Close stops everything and
// waits for it. `mooncake up`, `mooncake bench pd` and the end-to-end tests
// use it.
package cluster
