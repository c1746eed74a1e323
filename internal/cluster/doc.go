// Package cluster assembles engine instances and whole local P/D clusters
// in one process.
//
// StartInstance is the one assembler of an engine instance, used by
// `mooncake serve`, `mooncake up` (through Up), `mooncake bench pd` and the
// end-to-end tests. In order it builds the KV connector, the engine on it,
// the OpenAI server with the connector's metrics on its registry, binds
// Host:Port (port 0 picks a free one) and serves until Close. The connector
// is the Mooncake P/D connector for the producer, consumer and both roles
// (with a transfer engine; the assembler binds the bootstrap listener
// itself, a producer's always and a consumer's only with a BootstrapPort,
// and runs the connector's side channel on it), none for role "" or
// "none", or whatever InstanceConfig.KVConnector builds (the store
// connector of `mooncake serve --kv-connector store`). Close stops the
// server and engine first, then the connector's Run, then closes the
// connector and its transfer engine, and waits for all of them.
//
// With InstanceConfig.KVEventsEndpoint the instance publishes its engine's
// KV events (internal/kvevents) on that ZMQ address (port 0 picks one),
// started before the engine and stopped after it; ProxySpec then names the
// endpoints (",events=...,replay=..."), and Config.PrefillEvents makes Up
// do that for every prefill instance, so the proxy's policies index them.
// The server gets the P/D connector's PrepareParams (KVConnector.PrepareKV).
//
// Up starts prefill and decode instances and a proxy in front of them, and
// returns once the proxy has seen every instance healthy. Close stops
// everything and waits for it.
package cluster
