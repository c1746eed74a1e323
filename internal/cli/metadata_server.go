package cli

import (
	"fmt"
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/metadata"
)

// newMetadataServerCmd is `mooncake metadata-server`: Mooncake's HTTP
// metadata contract (GET/PUT/DELETE /metadata?key=) in memory.
func newMetadataServerCmd() *cobra.Command {
	var (
		host    string
		port    int
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "metadata-server",
		Short: "HTTP metadata server for transfer engines (GET/PUT/DELETE /metadata?key=)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 0 || port > 65535 {
				return &ExitError{Code: 2, Err: fmt.Errorf("--port %d out of range", port)}
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return err
			}
			log := cmdLogger(cmd, verbose)
			fmt.Fprintf(cmd.OutOrStdout(), "metadata server on http://%s/metadata\n", ln.Addr())
			return metadata.NewServer(log).Serve(cmd.Context(), ln)
		},
	}
	cmd.Flags().StringVar(&host, "host", "127.0.0.1", "address to listen on")
	cmd.Flags().IntVar(&port, "port", 8080, "port to listen on (0: any free port)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	return cmd
}
