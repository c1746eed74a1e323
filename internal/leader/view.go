package leader

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// DefaultCluster is the cluster id used when none is given (Mooncake's
// default cluster id).
const DefaultCluster = "mooncake_cluster"

// Scheme prefixes a master address that names an HA cluster through etcd:
// "etcd://h1:2379;h2:2379" or, with a cluster id, "etcd://h1:2379;h2:2379/ID".
const Scheme = "etcd://"

// Sentinel errors.
var (
	ErrNoLeader  = errors.New("no master leader elected")
	ErrBadView   = errors.New("malformed master view")
	ErrBadTarget = errors.New("malformed etcd master address")
)

// Key is the etcd key prefix of a cluster's master election (Mooncake's
// "mooncake-store/<cluster>/master_view"). Each candidate holds one key
// under it, bound to its session lease; the oldest key is the leader.
func Key(cluster string) string {
	if cluster == "" {
		cluster = DefaultCluster
	}
	return "mooncake-store/" + cluster + "/master_view"
}

// View is what the leader publishes: where its master RPC listens and the
// view version, the etcd create revision of its election key (it grows
// with every new leader, so a client can tell two leaders apart).
type View struct {
	Addr    string // host:port of the leader's gRPC service
	Version int64  // > 0
}

// String is the stored form: "ADDR VERSION".
func (v View) String() string { return v.Addr + " " + strconv.FormatInt(v.Version, 10) }

// ParseView decodes a stored view. The empty value is what a candidate
// writes while campaigning (and a new leader until its RPC listens): it
// means no serving leader (ErrNoLeader).
func ParseView(b []byte) (View, error) {
	s := string(b)
	if s == "" {
		return View{}, ErrNoLeader
	}
	addr, ver, ok := strings.Cut(s, " ")
	if !ok {
		return View{}, fmt.Errorf("%w: %q has no version", ErrBadView, truncate(s))
	}
	n, err := strconv.ParseInt(ver, 10, 64)
	if err != nil || n <= 0 {
		return View{}, fmt.Errorf("%w: bad version in %q", ErrBadView, truncate(s))
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return View{}, fmt.Errorf("%w: bad address in %q", ErrBadView, truncate(s))
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return View{}, fmt.Errorf("%w: bad port in %q", ErrBadView, truncate(s))
	}
	return View{Addr: addr, Version: n}, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Candidate is one election key as read from etcd.
type Candidate struct {
	Value          []byte
	CreateRevision int64
}

// Leader picks the leader among candidates (the oldest key, lowest create
// revision, as etcd's election recipe does) and decodes its view.
// ErrNoLeader when there is none or it is not serving yet.
func Leader(cands []Candidate) (View, error) {
	if len(cands) == 0 {
		return View{}, ErrNoLeader
	}
	l := slices.MinFunc(cands, func(a, b Candidate) int { return int(sign(a.CreateRevision - b.CreateRevision)) })
	v, err := ParseView(l.Value)
	if err != nil {
		return View{}, err
	}
	if v.Version != l.CreateRevision {
		return View{}, fmt.Errorf("%w: version %d is not the key's revision %d", ErrBadView, v.Version, l.CreateRevision)
	}
	return v, nil
}

func sign(x int64) int64 {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// Target is a parsed HA master address.
type Target struct {
	Endpoints []string // etcd client endpoints host:port
	Cluster   string
}

// IsHA reports whether a master address names an HA cluster (etcd://...).
func IsHA(addr string) bool { return strings.HasPrefix(addr, Scheme) }

// ParseTarget parses "etcd://h1:2379;h2:2379[/CLUSTER]" (";" or ","
// separate endpoints).
func ParseTarget(addr string) (Target, error) {
	if !IsHA(addr) {
		return Target{}, fmt.Errorf("%w: %q does not start with %s", ErrBadTarget, addr, Scheme)
	}
	rest := strings.TrimPrefix(addr, Scheme)
	hosts, cluster, _ := strings.Cut(rest, "/")
	if cluster == "" {
		cluster = DefaultCluster
	}
	if strings.ContainsAny(cluster, "/ \t\n") {
		return Target{}, fmt.Errorf("%w: bad cluster id %q", ErrBadTarget, cluster)
	}
	var t Target
	t.Cluster = cluster
	for _, h := range strings.FieldsFunc(hosts, func(r rune) bool { return r == ';' || r == ',' }) {
		h = strings.TrimSpace(h)
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return Target{}, fmt.Errorf("%w: endpoint %q is not host:port", ErrBadTarget, h)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return Target{}, fmt.Errorf("%w: endpoint %q has a bad port", ErrBadTarget, h)
		}
		t.Endpoints = append(t.Endpoints, h)
	}
	if len(t.Endpoints) == 0 {
		return Target{}, fmt.Errorf("%w: %q names no etcd endpoint", ErrBadTarget, addr)
	}
	return t, nil
}

// String formats the target back as an address.
func (t Target) String() string {
	s := Scheme + strings.Join(t.Endpoints, ";")
	if t.Cluster != DefaultCluster {
		s += "/" + t.Cluster
	}
	return s
}
