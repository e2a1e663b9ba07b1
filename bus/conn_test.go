package bus_test

import (
	"context"
	"strings"
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

// A failed Ping names the Redis it could not reach, even when it ran out
// of time before go-redis had a dial error to tell (the admin view shows
// it: TestRedisOutageAnswersLeakNothing got "context deadline exceeded"
// alone on a busy machine).
func TestRedisConnPingNamesTheAddress(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := bus.DialRedis(context.Background(), srv.URL(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // out of time before anything is dialled
	err = c.Ping(ctx)
	if err == nil || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("Ping with Redis stopped: %v, want an error naming %s", err, srv.Addr())
	}
}
