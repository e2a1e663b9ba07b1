package streamlog_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The Redis log runs a subscription and readers; every test must leave
// none of them behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
