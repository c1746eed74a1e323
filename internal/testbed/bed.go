package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrUnsupported is returned by New when this machine cannot make a bed
// (not root, or ip/nft/tc/unshare missing, or namespaces refused).
var ErrUnsupported = errors.New("testbed: network namespaces unavailable")

// Config configures a Bed.
type Config struct {
	Hosts  int          // number of hosts (1..200)
	Binary string       // the mooncake binary run by Host.Start (required to start processes)
	Logger *slog.Logger // nil = discard
}

// Bed is N hosts on a bridge.
type Bed struct {
	cfg    Config
	log    *slog.Logger
	slot   int
	lock   *os.File // flock of the slot, held until Close
	hosts  []*Host
	mu     sync.Mutex
	procs  []*Proc
	links  []*Link
	closed bool
}

// Host is one network namespace with its own address.
type Host struct {
	bed  *Bed
	Name string // hostname of its processes, e.g. "h1"
	NS   string // network namespace name
	Addr string // IPv4 address on the bed network
}

const (
	prefix   = "mctb" // namespaces, veths and lock files
	maxSlots = 250
)

func brNS(slot int) string      { return fmt.Sprintf("%s%dbr", prefix, slot) }
func hostNS(slot, i int) string { return fmt.Sprintf("%s%dh%d", prefix, slot, i) }
func rootVeth(slot int) string  { return fmt.Sprintf("%s%dr", prefix, slot) }
func lockFile(slot int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("%s%d.lock", prefix, slot))
}
func addr(slot, i int) string   { return fmt.Sprintf("10.250.%d.%d", slot, i) }
func subnet(slot int) string    { return fmt.Sprintf("10.250.%d.0/24", slot) }
func (b *Bed) RootAddr() string { return addr(b.slot, 254) }
func (b *Bed) Subnet() string   { return subnet(b.slot) }
func (b *Bed) Hosts() []*Host   { return b.hosts }
func (b *Bed) Host(i int) *Host { return b.hosts[i] }
func (h *Host) String() string  { return h.Name + "(" + h.Addr + ")" }
func (h *Host) ip(ctx context.Context, args ...string) error {
	return run(ctx, append([]string{"ip", "netns", "exec", h.NS}, args...)...)
}

// Supported reports why a bed cannot be made here (nil: it can).
func Supported() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root", ErrUnsupported)
	}
	for _, tool := range []string{"ip", "nft", "tc", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s not found (scripts/deps.sh installs iproute2 and nftables)", ErrUnsupported, tool)
		}
	}
	return nil
}

// New makes a bed of cfg.Hosts hosts. Close removes it.
func New(ctx context.Context, cfg Config) (*Bed, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	if cfg.Hosts < 1 || cfg.Hosts > 200 {
		return nil, fmt.Errorf("testbed: %d hosts (want 1..200)", cfg.Hosts)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Bed{cfg: cfg, log: log}
	slot, lock, err := claimSlot(ctx)
	if err != nil {
		return nil, err
	}
	b.slot, b.lock = slot, lock
	if err := b.build(ctx); err != nil {
		b.Close()
		return nil, err
	}
	log.Info("testbed ready", "subnet", b.Subnet(), "hosts", cfg.Hosts, "driver", b.RootAddr())
	return b, nil
}

// claimSlot takes the first slot whose lock file it can flock (the lock
// dies with its process), removes what a dead owner left there, and creates
// the slot's bridge namespace.
func claimSlot(ctx context.Context) (int, *os.File, error) {
	sweepDead(ctx)
	start := os.Getpid() % maxSlots
	for k := range maxSlots {
		slot := 1 + (start+k)%maxSlots
		f, ok := lockSlot(slot)
		if !ok {
			continue
		}
		sweep(ctx, slot)
		if err := run(ctx, "ip", "netns", "add", brNS(slot)); err != nil {
			f.Close()
			return 0, nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		return slot, f, nil
	}
	return 0, nil, fmt.Errorf("testbed: no free slot among %d", maxSlots)
}

// lockSlot flocks the slot's lock file (false: another process holds it).
func lockSlot(slot int) (*os.File, bool) {
	f, err := os.OpenFile(lockFile(slot), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// sweepDead removes the beds whose owner process is gone (a test killed
// before its cleanup ran).
func sweepDead(ctx context.Context) {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		var slot int
		if n, _ := fmt.Sscanf(name, prefix+"%dbr", &slot); n == 1 && name == brNS(slot) {
			if f, ok := lockSlot(slot); ok {
				sweep(ctx, slot)
				f.Close()
			}
		}
	}
}

// sweep removes everything of a slot (best effort).
func sweep(ctx context.Context, slot int) {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(name, fmt.Sprintf("%s%dh", prefix, slot)) {
			killNS(ctx, name)
			_ = run(ctx, "ip", "netns", "del", name)
		}
	}
	_ = run(ctx, "ip", "link", "del", rootVeth(slot))
	_ = run(ctx, "ip", "netns", "del", brNS(slot))
}

// killNS kills every process left in a namespace.
func killNS(ctx context.Context, ns string) {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (b *Bed) build(ctx context.Context) error {
	br := brNS(b.slot)
	steps := [][]string{
		{"ip", "-n", br, "link", "set", "lo", "up"},
		{"ip", "-n", br, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", br, "link", "set", "br0", "up"},
		// the driver's leg: root namespace <-> bridge
		{"ip", "link", "add", rootVeth(b.slot), "type", "veth", "peer", "name", "drv", "netns", br},
		{"ip", "-n", br, "link", "set", "drv", "master", "br0", "up"},
		{"ip", "addr", "add", b.RootAddr() + "/24", "dev", rootVeth(b.slot)},
		{"ip", "link", "set", rootVeth(b.slot), "up"},
	}
	for i := 1; i <= b.cfg.Hosts; i++ {
		h := &Host{bed: b, Name: fmt.Sprintf("h%d", i), NS: hostNS(b.slot, i), Addr: addr(b.slot, i)}
		b.hosts = append(b.hosts, h)
		leg := fmt.Sprintf("v%d", i)
		steps = append(steps,
			[]string{"ip", "netns", "add", h.NS},
			[]string{"ip", "-n", br, "link", "add", leg, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
			[]string{"ip", "-n", br, "link", "set", leg, "master", "br0", "up"},
			[]string{"ip", "-n", h.NS, "link", "set", "lo", "up"},
			[]string{"ip", "-n", h.NS, "addr", "add", h.Addr + "/24", "dev", "eth0"},
			[]string{"ip", "-n", h.NS, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
	}
	for _, h := range b.hosts {
		if err := h.nftInit(ctx); err != nil {
			return err
		}
	}
	return nil
}

// nftInit installs the host's filter: loopback always passes; packets
// from/to addresses in set "peers" (partitions) or "nets" (isolation) drop.
func (h *Host) nftInit(ctx context.Context) error {
	rules := `table inet mctb {
	set peers { type ipv4_addr; }
	set nets { type ipv4_addr; flags interval; }
	chain in { type filter hook input priority 0; policy accept;
		iifname "lo" accept
		ip saddr @peers drop
		ip saddr @nets drop
	}
	chain out { type filter hook output priority 0; policy accept;
		oifname "lo" accept
		ip daddr @peers drop
		ip daddr @nets drop
	}
}
`
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", h.NS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: nft in %s: %v: %s", ErrUnsupported, h.NS, err, bytes.TrimSpace(out))
	}
	return nil
}

// Partition drops all traffic between hosts a and c (both directions, in
// both namespaces) until Heal. Established connections stay open.
func (b *Bed) Partition(ctx context.Context, a, c *Host) error {
	if err := a.ip(ctx, "nft", "add", "element", "inet", "mctb", "peers", "{", c.Addr, "}"); err != nil {
		return err
	}
	return c.ip(ctx, "nft", "add", "element", "inet", "mctb", "peers", "{", a.Addr, "}")
}

// Heal undoes Partition.
func (b *Bed) Heal(ctx context.Context, a, c *Host) error {
	err1 := a.ip(ctx, "nft", "delete", "element", "inet", "mctb", "peers", "{", c.Addr, "}")
	err2 := c.ip(ctx, "nft", "delete", "element", "inet", "mctb", "peers", "{", a.Addr, "}")
	return errors.Join(err1, err2)
}

// Isolate makes the host drop every packet to or from the bed network
// (driver included): it stops answering without closing any socket.
func (h *Host) Isolate(ctx context.Context) error {
	return h.ip(ctx, "nft", "add", "element", "inet", "mctb", "nets", "{", subnet(h.bed.slot), "}")
}

// Rejoin undoes Isolate.
func (h *Host) Rejoin(ctx context.Context) error {
	return h.ip(ctx, "nft", "delete", "element", "inet", "mctb", "nets", "{", subnet(h.bed.slot), "}")
}

// LimitBandwidth shapes the host's egress with tc tbf to rate (tc syntax,
// e.g. "20mbit"); "" removes the limit.
func (h *Host) LimitBandwidth(ctx context.Context, rate string) error {
	if rate == "" {
		return h.ip(ctx, "tc", "qdisc", "del", "dev", "eth0", "root")
	}
	return h.ip(ctx, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "64kb", "latency", "200ms")
}

// Close kills every process of the bed, closes its links and removes its
// namespaces and veths. It is idempotent.
func (b *Bed) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	procs, links := b.procs, b.links
	b.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	for _, l := range links {
		l.Close()
	}
	if b.slot != 0 {
		ctx := context.Background()
		for _, h := range b.hosts {
			killNS(ctx, h.NS)
		}
		sweep(ctx, b.slot)
		b.lock.Close()
	}
	b.log.Info("testbed removed", "subnet", b.Subnet())
	return nil
}

func run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Reach reports whether a TCP connection from h to hostport opens within
// two seconds (a probe for partitions).
func (h *Host) Reach(ctx context.Context, hostport string) error {
	host, port, ok := strings.Cut(hostport, ":")
	if !ok {
		return fmt.Errorf("testbed: %q is not host:port", hostport)
	}
	return h.ip(ctx, "timeout", "2", "bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+port)
}
