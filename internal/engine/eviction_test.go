package engine

import (
	"errors"
	"testing"

	"github.com/kvcache-go/mooncake/internal/evict"
)

// TestEvictionOption: Config.Eviction selects the pool's eviction order;
// prefix caching works with either, and an unknown name is refused.
func TestEvictionOption(t *testing.T) {
	for _, k := range evict.Kinds {
		t.Run(string(k), func(t *testing.T) {
			e := newEngine(t, func(c *Config) { c.Eviction = k })
			p := prompt(70, 5)
			runToEnd(t, e, submit(t, e, greedy("a", p, 3)))
			second := runToEnd(t, e, submit(t, e, greedy("b", p, 3)))
			if second[0].final.NumCachedTokens != 64 {
				t.Fatalf("cached tokens %d, want 64", second[0].final.NumCachedTokens)
			}
		})
	}
	err := Config{Model: tiny(t), Eviction: "mru"}.Validate()
	if !errors.Is(err, evict.ErrUnknown) {
		t.Fatalf("Validate: %v", err)
	}
}
