package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"switchyard/bus"
	"switchyard/bus/bustest"
	"switchyard/internal/redistest"
)

var _ bus.Bus = (*bus.Redis)(nil)

func redisClient(t testing.TB) *redis.Client { return redistest.Client(t) }

func TestRedis(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "classic", true: "sharded"}[sharded], func(t *testing.T) {
			bustest.Run(t, func(t *testing.T) (bus.Bus, func(t *testing.T) bus.Bus) {
				ns := redistest.Namespace(t)
				cfg := bus.RedisConfig{Namespace: ns, Sharded: sharded}
				b := bus.NewRedis(redisClient(t), cfg)
				t.Cleanup(func() { _ = b.Close() })
				return b, func(t *testing.T) bus.Bus {
					p := bus.NewRedis(redisClient(t), cfg)
					t.Cleanup(func() { _ = p.Close() })
					return p
				}
			})
		})
	}
}

// After Redis restarts, the subscription comes back by itself, the bus says
// it had to (so the instance can re-sync), and delivery resumes.
func TestRedisResubscribesAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	resubscribed := make(chan string, 4)
	b := bus.NewRedis(rdb, bus.RedisConfig{Namespace: "t", Idle: 200 * time.Millisecond,
		OnResubscribe: func(id string) { resubscribed <- id }})
	defer b.Close()
	got := make(chan *bus.Envelope, 4)
	sub, err := b.Subscribe(context.Background(), "me", func(e *bus.Envelope) { got <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	srv.Restart()
	select {
	case id := <-resubscribed:
		if id != "me" {
			t.Fatalf("resubscribed %q", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no resubscription within 10s of the restart")
	}
	n, err := b.Publish(context.Background(), "me", &bus.Envelope{Kind: bus.KindCancel, TaskID: "after"})
	if err != nil || n != 1 {
		t.Fatalf("publish after the restart: %d, %v", n, err)
	}
	select {
	case e := <-got:
		if e.TaskID != "after" {
			t.Fatalf("got %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered after the restart")
	}
}

// A message on the channel that is not an envelope is dropped; the next
// one still arrives.
func TestRedisDropsMalformed(t *testing.T) {
	rdb := redisClient(t)
	ns := redistest.Namespace(t)
	b := bus.NewRedis(rdb, bus.RedisConfig{Namespace: ns})
	defer b.Close()
	got := make(chan *bus.Envelope, 4)
	sub, err := b.Subscribe(context.Background(), "me", func(e *bus.Envelope) { got <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := rdb.Publish(context.Background(), b.Channel("me"), "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), "me", &bus.Envelope{Kind: bus.KindCancel, TaskID: "ok"}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e.TaskID != "ok" {
			t.Fatalf("got %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("valid envelope after a malformed one not delivered")
	}
}

// BenchmarkRedisPublishRoundTrip is one envelope from one instance to
// another through Redis: publish, and the receiver's handler running.
func BenchmarkRedisPublishRoundTrip(b *testing.B) {
	rdb := redistest.Client(b)
	ns := redistest.Namespace(b)
	sender := bus.NewRedis(rdb, bus.RedisConfig{Namespace: ns})
	defer sender.Close()
	receiver := bus.NewRedis(redistest.Client(b), bus.RedisConfig{Namespace: ns})
	defer receiver.Close()
	got := make(chan struct{}, 1)
	sub, err := receiver.Subscribe(context.Background(), "r", func(*bus.Envelope) { got <- struct{}{} })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	e := &bus.Envelope{Kind: bus.KindChunk, From: "s", TaskID: "t", NodeID: "n", Gen: 1, Seq: 1, Delta: "a few words of output"}
	b.ReportAllocs()
	for b.Loop() {
		if n, err := sender.Publish(context.Background(), "r", e); err != nil || n != 1 {
			b.Fatal(n, err)
		}
		<-got
	}
}
