package store

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/tenant"

	"github.com/kvcache-go/mooncake/transfer"
)

// Mover is the part of the transfer engine the client uses to move bytes;
// *transfer.Engine implements it. Tests wrap it to inject faults.
type Mover interface {
	Name() string
	RegisterBytes(b []byte, location string) error
	Unregister(addr uintptr) error
	AllocateManaged(length int) ([]byte, error)
	FreeManaged(b []byte) error
	OpenSegment(ctx context.Context, name string) (transfer.SegmentID, error)
	// Transfer runs reqs and returns when they ended; it keeps no
	// reference to reqs after it returns (the client reuses the list).
	Transfer(ctx context.Context, reqs []transfer.Request) error
}

var _ Mover = (*transfer.Engine)(nil)

// Config configures a Client.
type Config struct {
	Master          string        // master gRPC address "host:port", or an HA cluster "etcd://h1:2379;h2:2379[/CLUSTER]" (required)
	Mover           Mover         // the transfer engine (required)
	ClientID        string        // unique client id (default: random)
	SegmentSize     uint64        // memory this client contributes to the pool (0 = pure client)
	Segment         []byte        // memory to contribute instead of allocating SegmentSize (registered and unregistered by the client; the caller frees it after Close)
	SegmentName     string        // name of the contributed segment (default: the transfer engine's name)
	LocalBufferSize uint64        // registered staging buffer for Put/Get (default 64 MiB)
	Replicas        int           // default replica count of Put (1)
	PingInterval    time.Duration // liveness ping period (1s)
	RPCTimeout      time.Duration // deadline of one master RPC when ctx has none (5s)
	UnmountGrace    time.Duration // Close waits this long for readers of our segment (2s)
	Disk            DiskTier      // disk tier behind the contributed segment (storage nodes; nil = none)
	// MountProof signs the proof of mount a master with data-path grants
	// asks of the contributed segment (its engine endpoint and range, for
	// this client: grant.Keyring.MountProof; storage nodes holding the
	// grant key set it). nil: none is sent.
	MountProof func(clientID, endpoint string, base, size uint64) ([]byte, error)
	Secret     string // cluster secret sent with every master call ("authorization: Bearer ..."); a master with one needs it for RemoveAll, RemoveByRegex and unmounts
	// Token is the tenant credential (a bearer token of the master's
	// tenant policy), sent with every master call instead of Secret and
	// once per fastrpc connection. The client then sees only its tenant's
	// keys, and its puts count against its tenant's quota.
	Token string
	// TenantID is the tenant the client names (Mooncake's tenant_id; ""
	// names none, the same as "default"). Without a Token it is the
	// client's tenant on a master whose policy lists it without
	// credentials, or, when the policy gives no tenant credentials
	// (Mooncake's policy), any tenant: reads and removals in its keys, and
	// puts refused as TENANT_NOT_REGISTERED unless the policy lists it.
	// With a Token it must be the token's tenant (or "default"), unless
	// the token is an admin's, which then acts inside the named tenant.
	// A master without tenants ignores it. docs/security.md.
	TenantID string
	// TLS, when set, reaches the master over TLS (gRPC and fastrpc; the
	// same-host fastrpc socket is not used). nil: plaintext.
	TLS *tls.Config
	// NoFastRPC keeps every master call on gRPC. By default the hot calls
	// (puts, replica lists, existence) use the master's fastrpc transport on
	// the same port when Master is a plain host:port and the master speaks it.
	NoFastRPC bool
	// ConnPool is where the client takes its fastrpc connection from
	// (default DefaultConnPool(): shared by the process's clients).
	ConnPool *ConnPool
	// Clock times read leases and put slots (default the wall clock). A
	// fake one (clock.Fake) must stay near the wall clock: a lease's end
	// becomes the deadline of its read.
	Clock  clock.Clock
	Logger *slog.Logger
	// Device is the GPU driver for PutFromDevice, GetIntoDevice and their
	// batch forms (device.go); nil: none.
	Device DeviceCopier
	// HotCache keeps the values of hot keys in this process's memory
	// (hotcache.go); off unless HotCache.Size is set.
	HotCache HotCacheConfig
}

func (c Config) withDefaults() Config {
	if c.LocalBufferSize == 0 {
		c.LocalBufferSize = 64 << 20
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.PingInterval == 0 {
		c.PingInterval = time.Second
	}
	if c.RPCTimeout == 0 {
		c.RPCTimeout = 5 * time.Second
	}
	if c.UnmountGrace == 0 {
		c.UnmountGrace = 2 * time.Second
	}
	if c.ConnPool == nil {
		c.ConnPool = DefaultConnPool()
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// tenantClaim is the tenant the client names on the wire ("" for none:
// the default tenant is named by naming none).
func (c Config) tenantClaim() string {
	if c.TenantID == tenant.DefaultName {
		return ""
	}
	return c.TenantID
}

// credential is what the client sends as its bearer token.
func (c Config) credential() string {
	if c.Token != "" {
		return c.Token
	}
	return c.Secret
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Master == "":
		return fmt.Errorf("store: %w: no master address", ErrInvalid)
	case c.Mover == nil:
		return fmt.Errorf("store: %w: no transfer engine", ErrInvalid)
	case c.Replicas < 0, c.PingInterval < 0, c.RPCTimeout < 0, c.UnmountGrace < 0:
		return fmt.Errorf("store: %w: negative replicas or duration", ErrInvalid)
	}
	if c.TenantID != "" {
		if err := tenant.CheckName(c.TenantID); err != nil {
			return fmt.Errorf("store: %w: tenant id: %v", ErrInvalid, err)
		}
	}
	return c.HotCache.Validate()
}
