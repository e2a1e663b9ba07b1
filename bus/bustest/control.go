package bustest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
)

// ControlFactory returns a fresh Control for one test, and a way to make
// another handle on the same network (a second instance's).
type ControlFactory func(t *testing.T) (c bus.Control, peer func(t *testing.T) bus.Control)

// follower runs one Follow in the background and gathers what it hears.
type follower struct {
	mu         sync.Mutex
	got        []string
	more       chan struct{}
	subscribed chan struct{} // closed at the first confirmation
	done       chan error
	cancel     context.CancelFunc
	stopOnce   sync.Once
}

// follow starts a follower of topic on c and waits for its subscription.
func follow(t *testing.T, c bus.Control, topic bus.Topic) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{more: make(chan struct{}, 1), subscribed: make(chan struct{}), done: make(chan error, 1), cancel: cancel}
	var once sync.Once
	go func() {
		f.done <- c.Follow(ctx, topic, func(p []byte) {
			f.mu.Lock()
			f.got = append(f.got, string(p))
			f.mu.Unlock()
			select {
			case f.more <- struct{}{}:
			default:
			}
		}, func() { once.Do(func() { close(f.subscribed) }) })
	}()
	t.Cleanup(func() { f.stop(t) })
	select {
	case <-f.subscribed:
	case err := <-f.done:
		t.Fatalf("Follow(%q) returned %v before subscribing", topic, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("Follow(%q) not subscribed within 5s", topic)
	}
	return f
}

// wait waits until n payloads arrived and returns them, or fails the test.
func (f *follower) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		f.mu.Lock()
		if len(f.got) >= n {
			out := append([]string(nil), f.got...)
			f.mu.Unlock()
			return out
		}
		have := len(f.got)
		f.mu.Unlock()
		select {
		case <-f.more:
		case <-deadline:
			t.Fatalf("waited 5s for %d messages, got %d", n, have)
		}
	}
}

func (f *follower) heard() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// stop ends the Follow and checks that it returned nil. It may be called
// more than once.
func (f *follower) stop(t *testing.T) {
	t.Helper()
	f.stopOnce.Do(func() {
		f.cancel()
		select {
		case err := <-f.done:
			if err != nil {
				t.Errorf("Follow returned %v after its context ended, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Follow did not return within 5s of its context ending")
		}
	})
}

// RunControl runs the Control suite.
func RunControl(t *testing.T, newControl ControlFactory) {
	ctx := context.Background()

	t.Run("BroadcastReachesEveryFollower", func(t *testing.T) {
		c, peer := newControl(t)
		other := peer(t)
		mine, theirs, twice := follow(t, c, "auth"), follow(t, other, "auth"), follow(t, other, "auth")
		n, err := c.Broadcast(ctx, "auth", []byte(`{"kind":"key_revoked"}`))
		if err != nil || n != 3 {
			t.Fatalf("Broadcast = %d, %v; want 3 receivers (the sender's own follower included)", n, err)
		}
		for _, f := range []*follower{mine, theirs, twice} {
			if got := f.wait(t, 1); got[0] != `{"kind":"key_revoked"}` {
				t.Fatalf("heard %q", got)
			}
		}
	})

	t.Run("TopicsAreSeparate", func(t *testing.T) {
		c, peer := newControl(t)
		auth, async := follow(t, c, "auth"), follow(t, peer(t), "async")
		if _, err := c.Broadcast(ctx, "async", []byte("a1")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Broadcast(ctx, "auth", []byte("k1")); err != nil {
			t.Fatal(err)
		}
		if got := async.wait(t, 1); len(got) != 1 || got[0] != "a1" {
			t.Fatalf("the async follower heard %q", got)
		}
		if got := auth.wait(t, 1); len(got) != 1 || got[0] != "k1" {
			t.Fatalf("the auth follower heard %q", got)
		}
	})

	t.Run("NobodyFollowing", func(t *testing.T) {
		c, _ := newControl(t)
		if n, err := c.Broadcast(ctx, "auth", []byte("x")); err != nil || n != 0 {
			t.Fatalf("Broadcast with no follower = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("InOrderPerSender", func(t *testing.T) {
		c, peer := newControl(t)
		f := follow(t, peer(t), "async")
		const n = 200
		for i := range n {
			if _, err := c.Broadcast(ctx, "async", []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		got := f.wait(t, n)
		for i, p := range got {
			if p != fmt.Sprint(i) {
				t.Fatalf("message %d is %q: out of order or lost (%d heard)", i, p, len(got))
			}
		}
	})

	t.Run("PayloadIsCopied", func(t *testing.T) {
		c, _ := newControl(t)
		f := follow(t, c, "auth")
		p := []byte("before")
		if _, err := c.Broadcast(ctx, "auth", p); err != nil {
			t.Fatal(err)
		}
		copy(p, "AFTER!") // the caller reuses its buffer at once
		if got := f.wait(t, 1); got[0] != "before" {
			t.Fatalf("heard %q: the Control kept the caller's buffer", got[0])
		}
	})

	t.Run("StoppedFollowerHearsNothing", func(t *testing.T) {
		c, peer := newControl(t)
		gone, stays := follow(t, peer(t), "auth"), follow(t, c, "auth")
		gone.stop(t)
		if _, err := c.Broadcast(ctx, "auth", []byte("late")); err != nil {
			t.Fatal(err)
		}
		stays.wait(t, 1)
		if got := gone.heard(); len(got) != 0 {
			t.Fatalf("a follower whose context ended heard %q", got)
		}
	})
}
