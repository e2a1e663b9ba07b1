package bus_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/bus/bustest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
)

var _ bus.Bus = (*bus.Redis)(nil)

func redisClient(t testing.TB) *redis.Client { return redistest.Client(t) }

// The suite on the shared Redis, classic and sharded, and on a private
// 3-master Redis Cluster (sharded, as --redis-cluster runs it).
func TestRedis(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "classic", true: "sharded"}[sharded], func(t *testing.T) {
			bustest.Run(t, redisFactory(func(t testing.TB) redis.UniversalClient { return redisClient(t) }, redistest.Namespace, sharded))
		})
	}
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, redistest.ClusterOptions{})
		// The cluster is the test's own: a namespace per subtest will do.
		var n atomic.Int32
		ns := func(testing.TB) string { return fmt.Sprintf("t%d", n.Add(1)) }
		bustest.Run(t, redisFactory(func(t testing.TB) redis.UniversalClient { return c.Client(t) }, ns, true))
	})
}

// redisFactory makes buses on clients from newClient, a fresh client (a
// connection of its own, as another instance has) for each, in a namespace
// from newNS.
func redisFactory(newClient func(testing.TB) redis.UniversalClient, newNS func(testing.TB) string, sharded bool) bustest.Factory {
	return func(t *testing.T) (bus.Bus, func(t *testing.T) bus.Bus) {
		cfg := bus.RedisConfig{Namespace: newNS(t), Sharded: sharded}
		b := bus.NewRedis(newClient(t), cfg)
		bustest.Start(t, b)
		return b, func(t *testing.T) bus.Bus {
			p := bus.NewRedis(newClient(t), cfg)
			bustest.Start(t, p)
			return p
		}
	}
}

// On a Redis Cluster each instance's channel lives in the slot of its name,
// so on one of the masters. The counts the liveness watcher acts on
// (Receivers, and Publish's) must be right wherever it lives: a live
// instance counted 0 looks dead to the others, and an instance's own
// channel counted 0 keeps the watcher in its grace period.
func TestRedisClusterReceiverCounts(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	ctx := context.Background()
	cfg := bus.RedisConfig{Namespace: "sy", Sharded: true}
	subscriber := bus.NewRedis(c.Client(t), cfg)
	defer bustest.Start(t, subscriber)()
	asker := bus.NewRedis(c.Client(t), cfg)
	defer bustest.Start(t, asker)()

	// One instance whose channel lives on each master.
	byMaster := map[*redistest.Server]string{}
	for i := 0; len(byMaster) < 3; i++ {
		id := fmt.Sprintf("inst-%d", i)
		if m := c.MasterFor(t, subscriber.Channel(id)); byMaster[m] == "" {
			byMaster[m] = id
		}
	}
	var ids []string
	got := make(chan string, 16)
	for _, id := range byMaster {
		ids = append(ids, id)
		sub, err := subscriber.Subscribe(ctx, id, func(e *bus.Envelope) { got <- e.TaskID })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
	}
	// Asked several times: a client that sends the question to a node of
	// its choosing is right only when it happens to pick the owner.
	for round := range 6 {
		n, err := asker.Receivers(ctx, append(ids, "inst-gone"))
		if err != nil {
			t.Fatal(err)
		}
		for m, id := range byMaster {
			if n[id] != 1 {
				t.Fatalf("round %d: Receivers = %v; %s (its channel on %s) has 1 subscriber", round, n, id, m)
			}
		}
		if n["inst-gone"] != 0 {
			t.Fatalf("round %d: Receivers counts an instance with no subscription: %v", round, n)
		}
		for m, id := range byMaster {
			k, err := asker.Publish(ctx, id, &bus.Envelope{Kind: bus.KindCancel, TaskID: id})
			if err != nil || k != 1 {
				t.Fatalf("round %d: Publish to %s (on %s) = %d, %v; want 1", round, id, m, k, err)
			}
			select {
			case e := <-got:
				if e != id {
					t.Fatalf("delivered %q, want %q", e, id)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: nothing delivered to %s within 5s", round, id)
			}
		}
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
	defer bustest.Start(t, b)()
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
	defer bustest.Start(t, b)()
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
	defer bustest.Start(b, sender)()
	receiver := bus.NewRedis(redistest.Client(b), bus.RedisConfig{Namespace: ns})
	defer bustest.Start(b, receiver)()
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

// Run, its context ended, stops every goroutine the bus started and
// returns promptly, even while its subscriptions are retrying an
// unreachable Redis (their backoff waits on the bus, not on a sleep).
// TestMain's goleak check shows nothing is left behind.
func TestRedisRunEndsPromptlyWhileRedisIsDown(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	b := bus.NewRedis(rdb, bus.RedisConfig{Namespace: "t", Idle: 100 * time.Millisecond,
		OnResubscribe: func(string) {}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := b.Subscribe(context.Background(), id, func(*bus.Envelope) {}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	// Let the loops reach their reconnect backoff, which grows to 1s.
	time.Sleep(1500 * time.Millisecond)
	start := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 300*time.Millisecond {
		t.Fatalf("Run took %v to return while Redis was down; want it prompt", d)
	}
	if _, err := b.Subscribe(context.Background(), "d", func(*bus.Envelope) {}); err != bus.ErrClosed {
		t.Fatalf("Subscribe after Run = %v, want ErrClosed", err)
	}
	if _, err := b.Publish(context.Background(), "a", &bus.Envelope{Kind: bus.KindCancel}); err != bus.ErrClosed {
		t.Fatalf("Publish after Run = %v, want ErrClosed", err)
	}
}

// NewRedis starts nothing. A subscription made before Run is confirmed
// (a publish counts it) and its envelopes wait for Run, which delivers
// them in order; a publish from the caller's goroutine works before Run.
// Once Run has returned nothing of the bus is left running.
func TestRedisSubscribeBeforeRun(t *testing.T) {
	rdb := redisClient(t)
	ns := redistest.Namespace(t)
	sender := bus.NewRedis(redisClient(t), bus.RedisConfig{Namespace: ns})
	before := goleak.IgnoreCurrent()
	b := bus.NewRedis(rdb, bus.RedisConfig{Namespace: ns})
	got := make(chan *bus.Envelope, 4)
	sub, err := b.Subscribe(context.Background(), "me", func(e *bus.Envelope) { got <- e })
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"one", "two"} {
		if n, err := sender.Publish(context.Background(), "me", &bus.Envelope{Kind: bus.KindCancel, TaskID: id}); err != nil || n != 1 {
			t.Fatalf("publish to a subscription made before Run = %d, %v; want 1 receiver", n, err)
		}
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("NewRedis, Subscribe or Publish started a goroutine: %v", err)
	}
	stop := bustest.Start(t, b)
	for _, want := range []string{"one", "two"} {
		select {
		case e := <-got:
			if e.TaskID != want {
				t.Fatalf("got %q, want %q (in order)", e.TaskID, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q not delivered once Run ran", want)
		}
	}
	stop()
	_ = sub.Close() // closed by Run's end already: a second Close returns
	if err := goleak.Find(before); err != nil {
		t.Errorf("Run left a goroutine behind: %v", err)
	}
}

// A failover moves an instance's channel to the new master: the
// subscription follows it by itself (the old master drops it; the bus
// subscribes again and says so), and the counts come from the new master.
func TestRedisClusterFailoverResubscribes(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: true})
	ctx := context.Background()
	resubscribed := make(chan string, 8)
	cfg := bus.RedisConfig{Namespace: "sy", Sharded: true, Idle: 200 * time.Millisecond}
	scfg := cfg
	scfg.OnResubscribe = func(id string) { resubscribed <- id }
	subscriber := bus.NewRedis(c.Client(t), scfg)
	defer bustest.Start(t, subscriber)()
	asker := bus.NewRedis(c.Client(t), cfg)
	defer bustest.Start(t, asker)()
	got := make(chan string, 8)
	sub, err := subscriber.Subscribe(ctx, "me", func(e *bus.Envelope) { got <- e.TaskID })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	m := c.MasterFor(t, subscriber.Channel("me"))
	var replica *redistest.Server
	for i, n := range c.Nodes[:3] {
		if n == m {
			replica = c.Nodes[3+i]
		}
	}
	c.Failover(t, replica)
	select {
	case <-resubscribed:
	case <-time.After(10 * time.Second):
		t.Fatal("no resubscription within 10s of the failover")
	}
	if got := c.MasterFor(t, subscriber.Channel("me")); got != replica {
		t.Fatalf("channel served by %s after the failover, want %s", got, replica)
	}
	// The asker's slot map may be stale at first; a zero makes it reload
	// (as the liveness watcher's second look would), so allow a few looks.
	var n map[string]int
	for range 50 {
		if n, err = asker.Receivers(ctx, []string{"me"}); err == nil && n["me"] == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond) // the client's slot map reloads in the background
	}
	// Where the subscription lives: on the new master, not the old one.
	// The old connection was closed before the new one subscribed, but the
	// old master may read that close after this client's question: a
	// subscription that stayed there would count 1 for good, so a few
	// looks tell the two apart.
	for _, node := range []*redistest.Server{m, replica} {
		want := int64(map[bool]int{true: 1}[node == replica])
		var v map[string]int64
		for range 50 {
			if v, err = node.Client().PubSubShardNumSub(ctx, subscriber.Channel("me")).Result(); err == nil && v[subscriber.Channel("me")] == want {
				break
			}
			time.Sleep(20 * time.Millisecond) // the server reads the closed connection on its own loop
		}
		if err != nil || v[subscriber.Channel("me")] != want {
			t.Fatalf("SHARDNUMSUB on %s = %v, %v; want %d", node, v, err, want)
		}
	}
	if n["me"] != 1 {
		t.Fatalf("Receivers after the failover = %v, %v; want me:1", n, err)
	}
	k, err := asker.Publish(ctx, "me", &bus.Envelope{Kind: bus.KindCancel, TaskID: "after"})
	if err != nil || k != 1 {
		t.Fatalf("Publish after the failover = %d, %v; want 1", k, err)
	}
	select {
	case id := <-got:
		if id != "after" {
			t.Fatalf("got %q", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered after the failover")
	}
}

var _ bus.Control = (*bus.RedisControl)(nil)

// The Control suite on the shared Redis, classic and sharded, and on a
// private 3-master Redis Cluster (sharded, as --redis-cluster runs it).
func TestRedisControl(t *testing.T) {
	factory := func(newClient func(testing.TB) redis.UniversalClient, newNS func(testing.TB) string, sharded bool) bustest.ControlFactory {
		return func(t *testing.T) (bus.Control, func(t *testing.T) bus.Control) {
			ns := newNS(t)
			return bus.NewRedisControl(newClient(t), ns, sharded), func(t *testing.T) bus.Control {
				return bus.NewRedisControl(newClient(t), ns, sharded)
			}
		}
	}
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "classic", true: "sharded"}[sharded], func(t *testing.T) {
			bustest.RunControl(t, factory(func(t testing.TB) redis.UniversalClient { return redisClient(t) }, redistest.Namespace, sharded))
		})
	}
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, redistest.ClusterOptions{})
		var n atomic.Int32
		ns := func(testing.TB) string { return fmt.Sprintf("t%d", n.Add(1)) }
		bustest.RunControl(t, factory(func(t testing.TB) redis.UniversalClient { return c.Client(t) }, ns, true))
	})
}

// A follower whose Redis restarts is told (onSubscribed again) and hears
// what is broadcast after.
func TestRedisControlResubscribesAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	c := bus.NewRedisControl(rdb, "t", false)
	ctx, cancel := context.WithCancel(context.Background())
	subscribed, got, done := make(chan struct{}, 4), make(chan string, 4), make(chan error, 1)
	go func() {
		done <- c.Follow(ctx, "auth", func(p []byte) { got <- string(p) }, func() { subscribed <- struct{}{} })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Follow returned %v", err)
		}
	}()
	<-subscribed
	srv.Restart()
	select {
	case <-subscribed:
	case <-time.After(15 * time.Second):
		t.Fatal("no new subscription within 15s of the restart")
	}
	if n, err := c.Broadcast(ctx, "auth", []byte("after")); err != nil || n != 1 {
		t.Fatalf("broadcast after the restart: %d, %v", n, err)
	}
	select {
	case p := <-got:
		if p != "after" {
			t.Fatalf("heard %q", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing heard after the restart")
	}
}
