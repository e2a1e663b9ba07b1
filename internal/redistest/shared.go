package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// URL is the shared Redis the tests use: SWITCHYARD_TEST_REDIS_URL, or
// redis://127.0.0.1:6379/0.
func URL() string {
	if u := os.Getenv("SWITCHYARD_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Client connects to the shared Redis and closes the client when the test
// ends. An unreachable Redis fails the test, unless
// SWITCHYARD_TEST_SKIP_REDIS=1 (then it skips).
func Client(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	if err := c.Ping(context.Background()).Err(); err != nil {
		_ = c.Close()
		if os.Getenv("SWITCHYARD_TEST_SKIP_REDIS") == "1" {
			t.Skip("Redis unreachable and SWITCHYARD_TEST_SKIP_REDIS=1")
		}
		t.Fatalf("Redis at %s is unreachable (%v): start it (scripts/test.sh does), or point SWITCHYARD_TEST_REDIS_URL at one", URL(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Namespace returns a fresh key namespace, so tests never see each other's
// keys, and deletes its keys when the test ends.
func Namespace(t testing.TB) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	ns := "sytest-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		opt, err := redis.ParseURL(URL())
		if err != nil {
			return
		}
		c := redis.NewClient(opt)
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, ns+":*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return ns
}
