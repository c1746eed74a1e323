package storenode

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// Config configures a storage node.
type Config struct {
	Master       string          // master gRPC address "host:port"
	SegmentSize  uint64          // bytes contributed to the pool
	Engine       transfer.Config // the node's transfer engine
	PingInterval time.Duration   // liveness ping period (1s)
	UnmountGrace time.Duration   // graceful unmount wait on shutdown (2s)
	Logger       *slog.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Master == "" {
		return fmt.Errorf("storenode: no master address")
	}
	if c.SegmentSize < 4096 {
		return fmt.Errorf("storenode: segment size %d below 4096 bytes", c.SegmentSize)
	}
	return c.Engine.Validate()
}

// Node is a running storage node.
type Node struct {
	eng    *transfer.Engine
	client *store.Client
}

// Start opens the engine, allocates and mounts the segment.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Engine.Logger == nil {
		cfg.Engine.Logger = cfg.Logger
	}
	eng, err := transfer.Open(ctx, cfg.Engine)
	if err != nil {
		return nil, fmt.Errorf("storenode: open transfer engine: %w", err)
	}
	cl, err := store.New(ctx, store.Config{Master: cfg.Master, Mover: eng, SegmentSize: cfg.SegmentSize,
		LocalBufferSize: 64 << 10, PingInterval: cfg.PingInterval, UnmountGrace: cfg.UnmountGrace, Logger: cfg.Logger})
	if err != nil {
		eng.Close()
		return nil, fmt.Errorf("storenode: %w", err)
	}
	cfg.Logger.Info("storage node mounted", "segment", cl.SegmentName(), "size", cfg.SegmentSize, "master", cfg.Master)
	return &Node{eng: eng, client: cl}, nil
}

// Name is the node's segment (and transfer engine) name.
func (n *Node) Name() string { return n.client.SegmentName() }

// Client is the node's store client (its segment, remount counter).
func (n *Node) Client() *store.Client { return n.client }

// Close unmounts gracefully, frees the segment and closes the engine.
func (n *Node) Close() error {
	n.client.Close()
	return n.eng.Close()
}

// Kill stops the node as a crash would: the engine stops serving and the
// node stops pinging without unmounting (tests).
func (n *Node) Kill() error {
	n.client.Abort()
	return n.eng.Close()
}

// Run starts a node and serves until ctx ends; ready, if not nil, is
// called with the node once it is mounted.
func Run(ctx context.Context, cfg Config, ready func(*Node)) error {
	n, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(n)
	}
	<-ctx.Done()
	return n.Close()
}
