package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
	"github.com/spf13/cobra"
)

const defaultMaster = "127.0.0.1:50051"

// masterAddrOr returns the flag value, else $MOONCAKE_MASTER, else the default.
func masterAddrOr(flag string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv("MOONCAKE_MASTER"); env != "" {
		return env
	}
	return defaultMaster
}

// secretOr returns the flag value, else $MOONCAKE_SECRET (the cluster
// secret; read at run time so --help never shows it).
func secretOr(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("MOONCAKE_SECRET")
}

// secretUsage is the help of every --secret flag.
const secretUsage = "cluster secret (default $MOONCAKE_SECRET): a master started with one needs it for rm --all/--regex and unmounts"

// parseSize parses "4096", "64KiB", "1.5MiB", "4GiB", "4gb", "512M".
// Decimal and binary suffixes both mean powers of 1024, as Mooncake's config does.
func parseSize(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
		{"tb", 1 << 40}, {"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10},
		{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}, {"b", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) >= 1<<63 {
		return 0, fmt.Errorf("bad size %q (want e.g. 4096, 64KiB, 4GiB)", s)
	}
	return uint64(f * float64(mult)), nil
}

// formatSize renders n bytes for humans: "512 B", "1.5 KiB", "4.0 GiB".
func formatSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// storeSession is a short-lived client of the CLI commands.
type storeSession struct {
	eng *transfer.Engine
	cl  *store.Client
}

func openStore(ctx context.Context, masterFlag, secret string, sec *clientSecurityFlags, rpcTimeout time.Duration) (*storeSession, error) {
	cs, err := sec.resolve()
	if err != nil {
		return nil, err
	}
	eng, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		return nil, fmt.Errorf("open transfer engine: %w", err)
	}
	addr := masterAddrOr(masterFlag)
	cl, err := store.New(ctx, store.Config{Master: addr, Mover: eng, LocalBufferSize: 1 << 20, RPCTimeout: rpcTimeout,
		Secret: secretOr(secret), Token: cs.token, TenantID: cs.tenantID, TLS: cs.tls})
	if err != nil {
		eng.Close()
		if strings.Contains(err.Error(), "connection refused") {
			err = fmt.Errorf("%w\n(nothing listens at %s: start `mooncake master`, or point --master or MOONCAKE_MASTER at it)", err, addr)
		}
		return nil, err
	}
	return &storeSession{eng: eng, cl: cl}, nil
}

func (s *storeSession) close() {
	s.cl.Close()
	s.eng.Close()
}

// storeCmd builds a client subcommand that gets a connected session.
func storeCmd(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, s *storeSession, args []string) error) (*cobra.Command, *string) {
	var masterFlag, secret string
	var rpcTimeout time.Duration
	var security clientSecurityFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			cmd.SetContext(ctx)
			s, err := openStore(ctx, masterFlag, secret, &security, rpcTimeout)
			if err != nil {
				return err
			}
			defer s.close()
			return run(cmd, s, a)
		},
	}
	cmd.Flags().StringVar(&masterFlag, "master", "", "master address HOST:PORT or HA cluster etcd://HOST:PORT[;HOST:PORT][/CLUSTER] (default $MOONCAKE_MASTER or "+defaultMaster+")")
	cmd.Flags().DurationVar(&rpcTimeout, "timeout", 5*time.Second, "deadline of each master call (an unreachable master fails after this)")
	cmd.Flags().StringVar(&secret, "secret", "", secretUsage)
	security.register(cmd.Flags())
	return cmd, &masterFlag
}

func notFound(key string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &ExitError{Code: 1, Err: fmt.Errorf("%s: no such key", key)}
	}
	return err
}

func newPutCmd() *cobra.Command {
	var replicas int
	var upsert, hardPin, softPin bool
	cmd, _ := storeCmd("put KEY FILE|-", "Store a file (or stdin) under KEY", cobra.ExactArgs(2),
		func(cmd *cobra.Command, s *storeSession, args []string) error {
			key, src := args[0], args[1]
			var data []byte
			var err error
			if src == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(src)
			}
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("read %s: %w", src, err)}
			}
			if len(data) == 0 {
				return &ExitError{Code: 2, Err: fmt.Errorf("%s is empty: nothing to store", src)}
			}
			if err := s.cl.RegisterBuffer(data); err != nil {
				return err
			}
			defer s.cl.UnregisterBuffer(data)
			ctx := cmd.Context()
			if err := s.cl.PutFrom(ctx, key, data, store.PutOptions{Replicas: replicas, Upsert: upsert, HardPin: hardPin, SoftPin: softPin}); err != nil {
				if errors.Is(err, store.ErrExists) {
					return &ExitError{Code: 1, Err: fmt.Errorf("%s: key exists (use --upsert to overwrite)", key)}
				}
				return err
			}
			info, err := s.cl.Stat(ctx, key)
			if err != nil {
				return err
			}
			note := ""
			if replicas > len(info.Replicas) {
				note = fmt.Sprintf(" (asked for %d: best effort, fewer segments had room)", replicas)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stored %s: %s, %d replica(s)%s\n", key, formatSize(info.Size), len(info.Replicas), note)
			return nil
		})
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas on distinct segments (best effort)")
	cmd.Flags().BoolVar(&upsert, "upsert", false, "overwrite an existing value")
	cmd.Flags().BoolVar(&hardPin, "hard-pin", false, "never evict this object")
	cmd.Flags().BoolVar(&softPin, "soft-pin", false, "evict this object only after unpinned ones")
	return cmd
}

func newGetCmd() *cobra.Command {
	cmd, _ := storeCmd("get KEY [FILE|-]", "Fetch KEY into FILE (default stdout); a missing key exits 1", cobra.RangeArgs(1, 2),
		func(cmd *cobra.Command, s *storeSession, args []string) error {
			key := args[0]
			ctx := cmd.Context()
			info, err := s.cl.Stat(ctx, key)
			if err != nil {
				return notFound(key, err)
			}
			buf := make([]byte, info.Size)
			if err := s.cl.RegisterBuffer(buf); err != nil {
				return err
			}
			defer s.cl.UnregisterBuffer(buf)
			n, err := s.cl.GetInto(ctx, key, buf)
			if errors.Is(err, store.ErrBufferTooSmall) { // replaced by a bigger value meanwhile
				return fmt.Errorf("%s changed while reading; retry", key)
			}
			if err != nil {
				return notFound(key, err)
			}
			if len(args) == 1 || args[1] == "-" {
				_, err = cmd.OutOrStdout().Write(buf[:n])
				return err
			}
			if err := os.WriteFile(args[1], buf[:n], 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s to %s\n", formatSize(uint64(n)), args[1])
			return nil
		})
	return cmd
}

func newLsCmd() *cobra.Command {
	var quiet bool
	cmd, _ := storeCmd("ls [PREFIX]", "List keys (with a prefix), sorted", cobra.MaximumNArgs(1),
		func(cmd *cobra.Command, s *storeSession, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			long := !quiet
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			cursor, count, total := "", 0, uint64(0)
			for {
				keys, next, err := s.cl.List(cmd.Context(), prefix, cursor, 1000)
				if err != nil {
					return err
				}
				for _, k := range keys {
					if long {
						fmt.Fprintf(w, "%s\t%d\t%s\n", formatSize(k.Size), k.Replicas, displayKey(k.Key))
					} else {
						fmt.Fprintln(w, displayKey(k.Key))
					}
					count++
					total += k.Size
				}
				if next == "" {
					break
				}
				cursor = next
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if long {
				fmt.Fprintf(cmd.ErrOrStderr(), "%d key(s), %s\n", count, formatSize(total))
			}
			return nil
		})
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "keys only (no size, replica count or summary)")
	return cmd
}

// displayKey is key as ls prints it: as is when every rune is printable and
// the key does not start with a double quote, otherwise Go-quoted
// ("a\nb"), so one key is always one line and a control character cannot
// reach the terminal.
func displayKey(key string) string {
	if key != "" && !strings.HasPrefix(key, `"`) && utf8.ValidString(key) && strings.IndexFunc(key, func(r rune) bool { return !strconv.IsPrint(r) }) < 0 {
		return key
	}
	return strconv.Quote(key)
}

func newRmCmd() *cobra.Command {
	var regex string
	var all, force bool
	cmd, _ := storeCmd("rm KEY|--regex R|--all", "Remove a key, the keys matching a regex, or all keys", cobra.MaximumNArgs(1),
		func(cmd *cobra.Command, s *storeSession, args []string) error {
			ctx := cmd.Context()
			modes := 0
			for _, on := range []bool{len(args) == 1, regex != "", all} {
				if on {
					modes++
				}
			}
			if modes != 1 {
				return &ExitError{Code: 2, Err: errors.New("rm takes exactly one of KEY, --regex R, --all")}
			}
			switch {
			case all:
				n, err := s.cl.RemoveAll(ctx, force)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %d object(s)\n", n)
			case regex != "":
				n, err := s.cl.RemoveByRegex(ctx, regex, force)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %d object(s)\n", n)
			default:
				err := s.cl.Remove(ctx, args[0], force)
				if errors.Is(err, store.ErrHasLease) {
					return &ExitError{Code: 1, Err: fmt.Errorf("%s: being read (leased); retry later or use --force", args[0])}
				}
				if err != nil {
					return notFound(args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			}
			return nil
		})
	cmd.Flags().StringVar(&regex, "regex", "", "remove the keys matching this RE2 pattern")
	cmd.Flags().BoolVar(&all, "all", false, "remove every key")
	cmd.Flags().BoolVar(&force, "force", false, "also remove objects that are being read (leased)")
	return cmd
}

func newStatCmd() *cobra.Command {
	cmd, _ := storeCmd("stat KEY", "Show a key's size, checksum and replicas", cobra.ExactArgs(1),
		func(cmd *cobra.Command, s *storeSession, args []string) error {
			info, err := s.cl.Stat(cmd.Context(), args[0])
			if err != nil {
				return notFound(args[0], err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "key:       %s\nsize:      %s (%d bytes)\ncrc32c:    %08x\nreplicas:  %d\n",
				info.Key, formatSize(info.Size), info.Size, info.CRC32C, len(info.Replicas))
			for _, r := range info.Replicas {
				fmt.Fprintf(out, "  - segment %s addr %#x\n", r.Segment, r.Addr)
			}
			fmt.Fprintf(out, "created:   %s\n", info.Created.UTC().Format(time.RFC3339Nano))
			if !info.LeaseUntil.IsZero() && info.LeaseUntil.After(time.Now()) {
				fmt.Fprintf(out, "leased until: %s\n", info.LeaseUntil.UTC().Format(time.RFC3339Nano))
			}
			if info.HardPin {
				fmt.Fprintln(out, "pin:       hard")
			} else if !info.SoftPinUntil.IsZero() {
				fmt.Fprintf(out, "pin:       soft until %s\n", info.SoftPinUntil.UTC().Format(time.RFC3339))
			}
			return nil
		})
	return cmd
}
