package transfer

import (
	"context"
	"fmt"
)

func openMetaStore(ctx context.Context, uri string) (metaStore, error) {
	return nil, fmt.Errorf("transfer: metadata %q: not supported yet", uri)
}
