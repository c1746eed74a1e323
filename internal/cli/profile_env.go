package cli

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
)

// cpuProfileEnv makes a mooncake process write a CPU profile of its whole
// run: MOONCAKE_CPUPROFILE=PREFIX writes PREFIX.ROLE-PID.pprof when the
// command returns (ROLE: the subcommand, "client" for a client process of
// `bench store --client-procs`). `bench store --cpuprofile FILE` with its
// servers in processes sets it for the processes it starts, so that the
// master, the storage nodes and the client processes are profiled too.
const cpuProfileEnv = "MOONCAKE_CPUPROFILE"

// profileRole names the process that runs args in a profile's file name.
func profileRole(args []string) string {
	if len(args) == 0 {
		return "mooncake"
	}
	for _, a := range args {
		if a == "--client-worker" {
			return "client"
		}
	}
	role := args[0]
	if role == "bench" && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		role += "-" + args[1]
	}
	return role
}

// profileFromEnv starts the CPU profile cpuProfileEnv asks for (none when
// prefix is empty) and returns what stops it and closes its file.
func profileFromEnv(prefix string, args []string) (stop func(), err error) {
	if prefix == "" {
		return func() {}, nil
	}
	path := fmt.Sprintf("%s.%s-%d.pprof", prefix, profileRole(args), os.Getpid())
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cpuProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", cpuProfileEnv, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
