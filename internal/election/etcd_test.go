package election_test

import (
	"testing"

	"github.com/kvcache-go/mooncake/internal/etcdtest"
)

func startEtcd(t *testing.T) (string, func()) { return etcdtest.Start(t) }
