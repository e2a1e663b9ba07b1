package sweep

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests on a goroutine any of them leaves
// behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
