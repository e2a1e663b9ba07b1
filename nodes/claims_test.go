package nodes_test

import (
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/nodes/claimstest"
)

func TestMemoryClaimsSuite(t *testing.T) {
	claimstest.Run(t, claimstest.Impl{
		New: func(*testing.T, time.Duration) nodes.Claims { return nodes.NewMemoryClaims() },
	})
}

// Each test runs under a key namespace of its own on the shared Redis.
func TestRedisClaimsSuite(t *testing.T) {
	claimstest.Run(t, claimstest.Impl{
		New: func(t *testing.T, ttl time.Duration) nodes.Claims {
			return nodes.NewRedisClaims(redistest.Client(t), nodes.RedisClaimsConfig{Namespace: redistest.Namespace(t), TTL: ttl})
		},
		// Claims carry no TTL (invariant 12): a dead instance's are purged
		// by the sweeper (TestRedisClaimsPurge), not lapsed.
		Lapses: false,
	})
}
