package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version overrides the version `mooncake --version` reports; release builds
// set it with -ldflags "-X github.com/kvcache-go/mooncake/internal/cli.Version=v1.2.3".
// Empty: the module version of the build info ("(devel)" in a checkout).
var Version string

// versionString is the one line `mooncake --version` and `mooncake version`
// print: the version, the VCS revision (with "-dirty" when the work tree had
// changes) and the Go version, from runtime/debug.ReadBuildInfo.
func versionString() string {
	return formatVersion(Version, readBuildInfo())
}

func readBuildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

func formatVersion(override string, bi *debug.BuildInfo) string {
	v, rev, dirty, goVersion := override, "", false, runtime.Version()
	if bi != nil {
		if v == "" {
			v = bi.Main.Version
		}
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	out := "mooncake " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "-dirty"
		}
		out += " (" + rev + ")"
	}
	return out + " " + goVersion
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}
