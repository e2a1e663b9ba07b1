package idempotency_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Waiters start timers and the Redis tests client pools: every test must
// leave none of them behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
