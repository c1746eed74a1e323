package cli

import (
	"strings"
	"testing"

	"github.com/kvcache-go/mooncake/store"
)

func TestStoreConnectorHotCacheConfig(t *testing.T) {
	t.Setenv(store.EnvHotCacheSize, "2048")
	t.Setenv(store.EnvHotAdmissionThreshold, "")
	t.Setenv(store.EnvHotBlockSize, "")
	c, err := parseStoreConnectorConfig(map[string]any{"master": "m:1"})
	if err != nil || c.hotCache() != (store.HotCacheConfig{Size: 2048}) {
		t.Fatalf("from the environment: %+v %v", c.hotCache(), err)
	}
	c, err = parseStoreConnectorConfig(map[string]any{"master": "m:1", "local_hot_cache_size": 1 << 20, "local_hot_block_size": 4096, "local_hot_admission_threshold": 3})
	if err != nil || c.hotCache() != (store.HotCacheConfig{Size: 1 << 20, BlockSize: 4096, AdmissionThreshold: 3}) {
		t.Fatalf("from the config: %+v %v", c.hotCache(), err)
	}
	if _, err := parseStoreConnectorConfig(map[string]any{"master": "m:1", "local_hot_admission_threshold": 300}); err == nil || !strings.Contains(err.Error(), "threshold") {
		t.Fatalf("threshold 300: %v", err)
	}
	t.Setenv(store.EnvHotCacheSize, "lots")
	if _, err := parseStoreConnectorConfig(map[string]any{"master": "m:1"}); err == nil || !strings.Contains(err.Error(), store.EnvHotCacheSize) {
		t.Fatalf("bad environment: %v", err)
	}
}
