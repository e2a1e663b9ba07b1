package bus

import (
	"context"
	"sync"
)

// Topic names one stream of announcements on a Control ("auth", "async").
// The users of a Control define their topics; to the Control a payload is
// bytes.
type Topic string

// Control carries announcements that every instance must hear — a revoked
// key, an async task submitted or ended — as a Bus carries envelopes to one
// instance. MemoryControl (one process) and RedisControl (a cluster)
// implement it, and the bus suite (bustest.RunControl) runs against both,
// so an instance alone takes the same path as one of many.
//
// Delivery is at most once: an instance away from Redis misses what was
// broadcast meanwhile, which is why Follow reports every (re)subscription
// and followers check what they might have missed then.
type Control interface {
	// Broadcast sends payload to every follower of topic, this instance's
	// included, and returns how many received it.
	Broadcast(ctx context.Context, topic Topic, payload []byte) (int, error)

	// Follow calls onMessage with each payload broadcast on topic, in
	// order, from the calling goroutine, until ctx ends; then it returns
	// nil (or ErrClosed if the Control was closed first). onSubscribed,
	// if not nil, is called each time the subscription is confirmed: the
	// first time, and again after a reconnection, when messages may have
	// been missed. Broadcasts made after the first onSubscribed returned
	// are delivered. onMessage must not block for long: it holds up the
	// topic's later messages to this follower.
	Follow(ctx context.Context, topic Topic, onMessage func([]byte), onSubscribed func()) error
}

// memoryFollowerQueue bounds what one in-process follower has not yet
// taken. A follower that falls this far behind loses the overflow, as a
// Redis subscriber past its output buffer limit would: followers cover
// losses at their next check.
const memoryFollowerQueue = 1024

// MemoryControl is the in-process Control: every follower in the process
// hears every broadcast on its topic.
type MemoryControl struct {
	mu        sync.Mutex
	followers map[Topic]map[*memFollower]struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

var _ Control = (*MemoryControl)(nil)

type memFollower struct{ queue chan []byte }

// NewMemoryControl returns an in-process Control with no followers.
func NewMemoryControl() *MemoryControl {
	return &MemoryControl{followers: map[Topic]map[*memFollower]struct{}{}, closed: make(chan struct{})}
}

// Broadcast implements Control. It does not wait for the followers: each
// gets a copy of payload queued.
func (m *MemoryControl) Broadcast(_ context.Context, topic Topic, payload []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.isClosed() {
		return 0, ErrClosed
	}
	n := 0
	for f := range m.followers[topic] {
		select {
		case f.queue <- append([]byte(nil), payload...):
			n++
		default: // this follower is too far behind: it misses this one
		}
	}
	return n, nil
}

// Follow implements Control.
func (m *MemoryControl) Follow(ctx context.Context, topic Topic, onMessage func([]byte), onSubscribed func()) error {
	f := &memFollower{queue: make(chan []byte, memoryFollowerQueue)}
	m.mu.Lock()
	if m.isClosed() {
		m.mu.Unlock()
		return ErrClosed
	}
	if m.followers[topic] == nil {
		m.followers[topic] = map[*memFollower]struct{}{}
	}
	m.followers[topic][f] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.followers[topic], f)
		m.mu.Unlock()
	}()
	if onSubscribed != nil {
		onSubscribed()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.closed:
			return ErrClosed
		case p := <-f.queue:
			onMessage(p)
		}
	}
}

// Close stops every Follow (they return ErrClosed) and refuses later calls.
func (m *MemoryControl) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		close(m.closed)
		m.mu.Unlock()
	})
	return nil
}

func (m *MemoryControl) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}
