package idempotency_test

import (
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/idempotency"
	"github.com/switchyard-dev/switchyard/idempotency/idempotencytest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// clock is the Memory store's clock, moved by the suite.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Pass(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestMemorySuite(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	idempotencytest.Run(t, idempotencytest.Impl{
		New: func(t *testing.T, cfg idempotency.Config) idempotency.Store {
			cfg.Now = c.Now
			return idempotency.NewMemory(cfg)
		},
		Pass: c.Pass,
	})
}

// Each test runs under a key namespace of its own on the shared Redis.
func TestRedisSuite(t *testing.T) {
	idempotencytest.Run(t, idempotencytest.Impl{
		New: func(t *testing.T, cfg idempotency.Config) idempotency.Store {
			return idempotency.NewRedis(redistest.Client(t), idempotency.Prefix(redistest.Namespace(t)), cfg)
		},
		// Redis's clock is its own: letting time pass is waiting for it.
		Pass: time.Sleep,
	})
}

// Redis Cluster runs a script only if all its keys share a hash slot: a
// record and its scope's count share the scope's hash tag.
func TestRedisKeysShareTheScopesHashTag(t *testing.T) {
	r := idempotency.NewRedis(nil, idempotency.Prefix("sy"), idempotency.Config{})
	tag := regexp.MustCompile(`\{([^}]+)\}`)
	rec, set := tag.FindStringSubmatch(r.RecordKey("acct-1", "my key {x}")), tag.FindStringSubmatch(r.KeysKey("acct-1"))
	if rec == nil || set == nil || rec[1] != "acct-1" || set[1] != "acct-1" {
		t.Fatalf("record %q and set %q do not share the scope's hash tag", r.RecordKey("acct-1", "my key {x}"), r.KeysKey("acct-1"))
	}
	if redistest.Slot(r.RecordKey("acct-1", "a")) != redistest.Slot(r.KeysKey("acct-1")) {
		t.Fatal("a record and its scope's set are in different slots")
	}
}
