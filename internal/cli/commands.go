package cli

import "github.com/spf13/cobra"

// extraCommands lists the top-level subcommands besides bench, in help order.
// Each entry's constructor lives in its own file (serve.go, proxy.go, ...).
var extraCommands = []func() *cobra.Command{
	newMetadataServerCmd, // transfer engine metadata
	newServeCmd,          // reference inference engine
	newModelCmd,          // model init
	newProxyCmd,          // P/D proxy
	newConductorCmd,      // KV cache indexer service (Indexer API)
	newUpCmd,             // whole P/D cluster in one process
	newMasterCmd,         // store master
	newStoreNodeCmd,      // store storage node
	newClientCmd,         // real client serving dummy clients
	newPutCmd,            // store client: put
	newGetCmd,            // store client: get
	newLsCmd,             // store client: ls
	newRmCmd,             // store client: rm
	newStatCmd,           // store client: stat
	newStatusCmd,         // cluster summary from the master's and the proxy's endpoints
}

// benchCommands lists the `mooncake bench ...` subcommands.
var benchCommands = []func() *cobra.Command{
	newBenchServeCmd,        // reference engine
	newBenchStoreCmd,        // store vs redis
	newBenchStoreDurableCmd, // store durable metadata on vs off, disk tier
	newBenchStoreDiskCmd,    // disk tier against its disk
	newBenchMasterCmd,       // master at pool scale, real processes, vs redis
	newBenchTransferCmd,     // transfer engine
	newBenchPDCmd,           // P/D disaggregation
	newBenchTraceCmd,        // trace-driven cache policies and KV-aware routing
	newBenchSoakCmd,         // mixed load on the multi-host test bed
}
