package bus_test

import (
	"context"
	"testing"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// Close is idempotent, as the Close of every resource is: a second one
// returns the first one's answer, nil.
func TestRedisConnCloseTwice(t *testing.T) {
	redistest.Client(t) // skips or fails the test when Redis is unreachable
	c, err := bus.DialRedis(context.Background(), redistest.URL(), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
