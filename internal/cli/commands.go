package cli

import "github.com/spf13/cobra"

// extraCommands lists the top-level subcommands besides bench, in help order.
// Each entry's constructor lives in its own file (serve.go, proxy.go, ...).
var extraCommands = []func() *cobra.Command{
	newMetadataServerCmd, // transfer engine metadata (issue 2)
	newServeCmd,          // reference inference engine (issue 3)
	newModelCmd,          // model init (issue 3)
	newProxyCmd,          // P/D proxy (issue 4)
	newUpCmd,             // whole P/D cluster in one process (issue 4)
	newMasterCmd,         // store master (issue 5)
	newStoreNodeCmd,      // store storage node (issue 5)
	newClientCmd,         // real client serving dummy clients (issue 11)
	newPutCmd,            // store client: put (issue 5)
	newGetCmd,            // store client: get (issue 5)
	newLsCmd,             // store client: ls (issue 5)
	newRmCmd,             // store client: rm (issue 5)
	newStatCmd,           // store client: stat (issue 5)
	newStatusCmd,         // cluster summary from the master's and the proxy's endpoints (issue 17)
}

// benchCommands lists the `mooncake bench ...` subcommands.
var benchCommands = []func() *cobra.Command{
	newBenchServeCmd,        // reference engine (issue 3)
	newBenchStoreCmd,        // store vs redis (issue 5)
	newBenchStoreDurableCmd, // store durable metadata on vs off, disk tier (issue 14)
	newBenchMasterCmd,       // master at pool scale, real processes, vs redis
	newBenchTransferCmd,     // transfer engine (issue 2)
	newBenchPDCmd,           // P/D disaggregation (issue 4)
	newBenchTraceCmd,        // trace-driven cache policies and KV-aware routing
	newBenchSoakCmd,         // mixed load on the multi-host test bed (issue 15)
}
