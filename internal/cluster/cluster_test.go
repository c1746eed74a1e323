package cluster

import (
	"context"
	"testing"

	"github.com/kvcache-go/mooncake/internal/model"
)

func TestValidate(t *testing.T) {
	m, err := model.NewBuiltin("tiny", 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  InstanceConfig
		ok   bool
	}{
		{"plain", InstanceConfig{Model: m}, true},
		{"producer", InstanceConfig{Model: m, Role: "producer"}, true},
		{"no model", InstanceConfig{}, false},
		{"bad role", InstanceConfig{Model: m, Role: "prefill"}, false},
		{"negative", InstanceConfig{Model: m, NumBlocks: -1}, false},
	}
	for _, tc := range tests {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := StartInstance(context.Background(), InstanceConfig{Model: m, Role: "prefill"}); err == nil {
		t.Fatal("bad role started")
	}
	if _, err := Up(context.Background(), Config{Model: m, Prefill: -1}); err == nil {
		t.Fatal("negative count accepted")
	}
}
