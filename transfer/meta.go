package transfer

import (
	"context"
	"fmt"

	"github.com/kvcache-go/mooncake/internal/metadata"
)

func openMetaStore(ctx context.Context, uri string) (metaStore, error) {
	s, err := metadata.Open(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("transfer: %w", err)
	}
	return s, nil
}
