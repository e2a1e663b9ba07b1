package bus

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisControl is the Control of a cluster: one pub/sub channel per topic,
// "{ns}:{topic}:events". With sharded pub/sub (a Redis Cluster) each
// topic's channel lives on the master of its slot, every follower
// subscribes there, and the count Broadcast returns is every follower's,
// as on a single Redis; classic PUBLISH on a cluster would count only the
// subscribers of the master asked.
type RedisControl struct {
	rdb     redis.UniversalClient
	ns      string
	sharded bool
}

var _ Control = (*RedisControl)(nil)

// NewRedisControl returns a Control on rdb in namespace (DefaultNamespace
// if empty), with sharded pub/sub (SPUBLISH, SSUBSCRIBE: Redis 7) when
// sharded is set, as the Bus's RedisConfig.Sharded: every instance and the
// CLI must agree. The caller owns rdb.
func NewRedisControl(rdb redis.UniversalClient, namespace string, sharded bool) *RedisControl {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return &RedisControl{rdb: rdb, ns: namespace, sharded: sharded}
}

// Channel is the pub/sub channel of topic.
func (c *RedisControl) Channel(topic Topic) string { return c.ns + ":" + string(topic) + ":events" }

// Broadcast implements Control.
func (c *RedisControl) Broadcast(ctx context.Context, topic Topic, payload []byte) (int, error) {
	publish := c.rdb.Publish
	if c.sharded {
		publish = c.rdb.SPublish
	}
	n, err := publish(ctx, c.Channel(topic), payload).Result()
	return int(n), err
}

// controlIdle is how long a follower waits for a message before it looks
// at its connection again; controlRetry is its pause while Redis is away.
const (
	controlIdle  = 5 * time.Second
	controlRetry = time.Second
)

// Follow implements Control. While Redis is away it retries every second;
// go-redis subscribes again on the next receive, and the confirmation
// calls onSubscribed.
func (c *RedisControl) Follow(ctx context.Context, topic Topic, onMessage func([]byte), onSubscribed func()) error {
	subscribe := c.rdb.Subscribe
	if c.sharded {
		subscribe = c.rdb.SSubscribe
	}
	ps := subscribe(ctx, c.Channel(topic))
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		if stop() {
			_ = ps.Close()
		}
	}()
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, controlIdle)
		if err != nil {
			var ne net.Error
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, redis.ErrClosed) {
				return ErrClosed
			}
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			select { // Redis is away; go-redis resubscribes on the next receive
			case <-ctx.Done():
				return nil
			case <-time.After(controlRetry):
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			onMessage([]byte(m.Payload))
		case *redis.Subscription:
			if (m.Kind == "subscribe" || m.Kind == "ssubscribe") && onSubscribed != nil {
				onSubscribed()
			}
		}
	}
	return nil
}
