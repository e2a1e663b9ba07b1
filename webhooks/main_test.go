package webhooks

import (
	"testing"

	"go.uber.org/goleak"
)

// The loop, the sends and the HTTP client's connections must all be gone
// once a Dispatcher's Run has returned.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
