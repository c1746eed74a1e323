package cli

import (
	"fmt"
	"os"

	"github.com/kvcache-go/mooncake/internal/grant"
)

// grantKeyUsage is the help of every --grant-key-file flag.
const grantKeyUsage = "data-path grant keys, one \"ID:HEX\" a line, the highest id signing (default $MOONCAKE_GRANT_KEY_FILE; none = no grants): " +
	"the master signs a grant for each extent it hands out, storage nodes refuse transfers without one (docs/security.md)"

// grantKeys loads the key file named by the flag or
// $MOONCAKE_GRANT_KEY_FILE; nil without either.
func grantKeys(flag string) (*grant.Keyring, error) {
	path := flag
	if path == "" {
		path = os.Getenv("MOONCAKE_GRANT_KEY_FILE")
	}
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--grant-key-file: %w", err)
	}
	k, err := grant.ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("--grant-key-file %s: %w", path, err)
	}
	return k, nil
}
