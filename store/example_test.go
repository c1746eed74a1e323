package store_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// Example shows the client's life cycle against a running master
// (`mooncake master`) and storage nodes (`mooncake store`).
func Example() {
	ctx := context.Background()
	eng, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	c, err := store.New(ctx, store.Config{Master: "127.0.0.1:50051", Mover: eng})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if err := c.PutWith(ctx, "kv/prefix-hash-1", []byte("block bytes"), store.PutOptions{Replicas: 2}); err != nil &&
		!errors.Is(err, store.ErrExists) {
		log.Fatal(err)
	}
	v, err := c.Get(ctx, "kv/prefix-hash-1")
	switch {
	case errors.Is(err, store.ErrNotFound):
		fmt.Println("evicted or never stored: recompute")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("%d bytes\n", len(v))
	}
}

// Example_zeroCopy reads into memory registered once, as a KV cache
// connector does with its paged KV buffers.
func Example_zeroCopy() {
	ctx := context.Background()
	eng, _ := transfer.Open(ctx, transfer.Config{})
	defer eng.Close()
	c, err := store.New(ctx, store.Config{Master: "127.0.0.1:50051", Mover: eng})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	kv := make([]byte, 64<<20) // the KV cache region
	if err := c.RegisterBuffer(kv); err != nil {
		log.Fatal(err)
	}
	block := kv[:1<<20]
	if err := c.PutFrom(ctx, "kv/block-7", block, store.PutOptions{}); err != nil && !errors.Is(err, store.ErrExists) {
		log.Fatal(err)
	}
	n, err := c.GetInto(ctx, "kv/block-7", kv[1<<20:2<<20])
	fmt.Println(n, err)
}
