// Package bustest is the behavioural suite every bus.Bus implementation
// must pass.
package bustest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
)

// Factory returns a fresh bus for one test, running (see Start), and a way
// to make another handle on the same network (a second instance's
// connection). For Memory that is the same value; for Redis, a new client.
type Factory func(t *testing.T) (b bus.Bus, peer func(t *testing.T) bus.Bus)

// Start runs b until the test ends or the returned stop is called; stop
// returns once b's Run has, and fails the test if Run failed.
func Start(t testing.TB, b bus.Bus) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("bus Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// collector gathers delivered envelopes.
type collector struct {
	mu   sync.Mutex
	got  []*bus.Envelope
	more chan struct{}
}

func newCollector() *collector { return &collector{more: make(chan struct{}, 1024)} }

func (c *collector) handle(e *bus.Envelope) {
	c.mu.Lock()
	c.got = append(c.got, e)
	c.mu.Unlock()
	c.more <- struct{}{}
}

// wait waits until n envelopes arrived, or fails the test.
func (c *collector) wait(t *testing.T, n int) []*bus.Envelope {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		if len(c.got) >= n {
			out := append([]*bus.Envelope(nil), c.got...)
			c.mu.Unlock()
			return out
		}
		c.mu.Unlock()
		select {
		case <-c.more:
		case <-deadline:
			t.Fatalf("waited 5s for %d envelopes, got %d", n, len(c.got))
		}
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// Run runs the suite.
func Run(t *testing.T, newBus Factory) {
	ctx := context.Background()

	t.Run("PublishReachesSubscriber", func(t *testing.T) {
		b, peer := newBus(t)
		other := peer(t)
		c := newCollector()
		sub, err := b.Subscribe(ctx, "inst-a", c.handle)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		sent := &bus.Envelope{Kind: bus.KindAssign, From: "inst-b", TaskID: "t1", NodeID: "n1", Gen: 7,
			TaskType: "echo", Content: "héllo", Params: []byte(`{"a":1}`), Stream: true, Deadline: 1234, ReplyTo: "inst-b"}
		n, err := other.Publish(ctx, "inst-a", sent)
		if err != nil || n != 1 {
			t.Fatalf("Publish = %d, %v; want 1 receiver", n, err)
		}
		got := c.wait(t, 1)[0]
		if fmt.Sprint(*got) != fmt.Sprint(*sent) {
			t.Fatalf("received %+v, sent %+v", *got, *sent)
		}
	})

	t.Run("PublishToNobodyReportsZero", func(t *testing.T) {
		b, _ := newBus(t)
		n, err := b.Publish(ctx, "nobody-here", &bus.Envelope{Kind: bus.KindCancel, TaskID: "t"})
		if err != nil || n != 0 {
			t.Fatalf("Publish to an instance with no subscriber = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("ChannelsAreSeparate", func(t *testing.T) {
		b, peer := newBus(t)
		other := peer(t)
		ca, cb := newCollector(), newCollector()
		sa, err := b.Subscribe(ctx, "inst-a", ca.handle)
		if err != nil {
			t.Fatal(err)
		}
		defer sa.Close()
		sb, err := other.Subscribe(ctx, "inst-b", cb.handle)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		if _, err := b.Publish(ctx, "inst-b", &bus.Envelope{Kind: bus.KindChunk, TaskID: "for-b", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Publish(ctx, "inst-a", &bus.Envelope{Kind: bus.KindChunk, TaskID: "for-a", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if got := ca.wait(t, 1)[0].TaskID; got != "for-a" {
			t.Fatalf("inst-a got %q", got)
		}
		if got := cb.wait(t, 1)[0].TaskID; got != "for-b" {
			t.Fatalf("inst-b got %q", got)
		}
		if ca.count() != 1 || cb.count() != 1 {
			t.Fatalf("extra deliveries: a=%d b=%d", ca.count(), cb.count())
		}
	})

	t.Run("OrderIsKeptFromOnePublisher", func(t *testing.T) {
		b, peer := newBus(t)
		other := peer(t)
		c := newCollector()
		sub, err := b.Subscribe(ctx, "inst-a", c.handle)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		const n = 200
		for i := 1; i <= n; i++ {
			if _, err := other.Publish(ctx, "inst-a", &bus.Envelope{Kind: bus.KindChunk, TaskID: "t", Seq: uint32(i)}); err != nil {
				t.Fatal(err)
			}
		}
		for i, e := range c.wait(t, n) {
			if e.Seq != uint32(i+1) {
				t.Fatalf("envelope %d has seq %d: order lost", i, e.Seq)
			}
		}
	})

	// Publishes from many goroutines at once (a Redis bus sends some in a
	// goroutine of their own and queues the rest for pipelines): each is
	// answered with its own receiver count, each arrives once, and each
	// goroutine's arrive in its order.
	t.Run("ConcurrentPublishesEachAnswered", func(t *testing.T) {
		b, peer := newBus(t)
		other := peer(t)
		const senders, each = 20, 50
		var mu sync.Mutex
		next := map[string]uint32{}
		var bad []string
		all := make(chan struct{}, senders*each)
		sub, err := b.Subscribe(ctx, "inst-a", func(e *bus.Envelope) {
			mu.Lock()
			if e.Seq != next[e.TaskID]+1 {
				bad = append(bad, fmt.Sprintf("%s: seq %d after %d", e.TaskID, e.Seq, next[e.TaskID]))
			}
			next[e.TaskID] = e.Seq
			mu.Unlock()
			all <- struct{}{}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		var wg sync.WaitGroup
		errs := make(chan error, 2*senders*each)
		for g := range senders {
			wg.Go(func() {
				for i := 1; i <= each; i++ {
					id := fmt.Sprintf("sender-%d", g)
					if n, err := other.Publish(ctx, "inst-a", &bus.Envelope{Kind: bus.KindChunk, TaskID: id, Seq: uint32(i)}); err != nil || n != 1 {
						errs <- fmt.Errorf("%s %d to a subscriber: %d, %v", id, i, n, err)
					}
					if n, err := other.Publish(ctx, "nobody-"+id, &bus.Envelope{Kind: bus.KindChunk, TaskID: id, Seq: uint32(i)}); err != nil || n != 0 {
						errs <- fmt.Errorf("%s %d to nobody: %d, %v", id, i, n, err)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		deadline := time.After(10 * time.Second)
		for range senders * each {
			select {
			case <-all:
			case <-deadline:
				t.Fatal("not every envelope arrived within 10 s")
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("order lost: %v", bad[:min(len(bad), 5)])
		}
	})

	t.Run("ReceiversCountsSubscribers", func(t *testing.T) {
		b, peer := newBus(t)
		other := peer(t)
		sub, err := b.Subscribe(ctx, "inst-a", func(*bus.Envelope) {})
		if err != nil {
			t.Fatal(err)
		}
		got, err := other.Receivers(ctx, []string{"inst-a", "inst-gone"})
		if err != nil {
			t.Fatal(err)
		}
		if got["inst-a"] != 1 || got["inst-gone"] != 0 {
			t.Fatalf("Receivers = %v; want inst-a:1, inst-gone:0", got)
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		// The unsubscription is confirmed once Receivers no longer counts it.
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err = other.Receivers(ctx, []string{"inst-a"})
			if err != nil {
				t.Fatal(err)
			}
			if got["inst-a"] == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("inst-a still counted 5s after its subscription closed")
			}
			time.Sleep(10 * time.Millisecond) // polling the bus's own view; there is no event for it
		}
		n, err := other.Publish(ctx, "inst-a", &bus.Envelope{Kind: bus.KindCancel, TaskID: "t"})
		if err != nil || n != 0 {
			t.Fatalf("Publish after unsubscribe = %d, %v; want 0", n, err)
		}
	})

	t.Run("NoDeliveryAfterClose", func(t *testing.T) {
		b, _ := newBus(t)
		c := newCollector()
		sub, err := b.Subscribe(ctx, "inst-a", c.handle)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		_, _ = b.Publish(ctx, "inst-a", &bus.Envelope{Kind: bus.KindCancel, TaskID: "t"})
		// A second subscriber proves the publish was processed.
		c2 := newCollector()
		sub2, err := b.Subscribe(ctx, "inst-a", c2.handle)
		if err != nil {
			t.Fatal(err)
		}
		defer sub2.Close()
		if _, err := b.Publish(ctx, "inst-a", &bus.Envelope{Kind: bus.KindCancel, TaskID: "t2"}); err != nil {
			t.Fatal(err)
		}
		c2.wait(t, 1)
		if c.count() != 0 {
			t.Fatalf("closed subscription received %d envelopes", c.count())
		}
	})
}
