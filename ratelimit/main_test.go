package ratelimit_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Memory starts a janitor and the Redis tests start client pools: every
// test must leave none of them behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
