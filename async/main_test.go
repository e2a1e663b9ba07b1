package async_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The pump's loops and task goroutines, and the PostgreSQL pool, must not
// outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
