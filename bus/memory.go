package bus

import (
	"context"
	"sync"
	"sync/atomic"
)

// Memory is the in-process Bus: every instance that shares one Memory can
// reach the others. It delivers synchronously, inside Publish, a shallow
// copy of the envelope; handlers must not block (the Bus contract) and
// publishers must not hold locks a handler might take.
type Memory struct {
	mu     sync.RWMutex
	subs   map[string][]*memSub
	closed bool
}

var _ Bus = (*Memory)(nil)

// NewMemory returns an empty in-process bus.
func NewMemory() *Memory {
	return &Memory{subs: make(map[string][]*memSub)}
}

type memSub struct {
	m      *Memory
	id     string
	h      Handler
	closed atomic.Bool // no delivery starts once set; one already running finishes
}

// Subscribe implements Bus.
func (m *Memory) Subscribe(_ context.Context, id string, h Handler) (Subscription, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	s := &memSub{m: m, id: id, h: h}
	m.subs[id] = append(m.subs[id], s)
	return s, nil
}

// Publish implements Bus.
func (m *Memory) Publish(_ context.Context, to string, e *Envelope) (int, error) {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return 0, ErrClosed
	}
	subs := m.subs[to]
	m.mu.RUnlock()
	n := 0
	for _, s := range subs {
		if s.deliver(e) {
			n++
		}
	}
	return n, nil
}

// Receivers implements Bus.
func (m *Memory) Receivers(_ context.Context, ids []string) (map[string]int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	out := make(map[string]int, len(ids))
	for _, id := range ids {
		if n := len(m.subs[id]); n > 0 {
			out[id] = n
		}
	}
	return out, nil
}

// Run implements Bus: Memory delivers inside Publish and starts nothing,
// so Run only waits for ctx, then closes the bus.
func (m *Memory) Run(ctx context.Context) error {
	<-ctx.Done()
	return m.Close()
}

// Close closes the bus, as the end of Run does: subscriptions stop
// delivering and every call after it fails with ErrClosed. Idempotent.
func (m *Memory) Close() error {
	m.mu.Lock()
	subs := m.subs
	m.subs = map[string][]*memSub{}
	m.closed = true
	m.mu.Unlock()
	for _, list := range subs {
		for _, s := range list {
			s.stop()
		}
	}
	return nil
}

func (s *memSub) deliver(e *Envelope) bool {
	if s.closed.Load() {
		return false
	}
	c := *e
	s.h(&c)
	return true
}

func (s *memSub) stop() { s.closed.Store(true) }

// Close implements Subscription.
func (s *memSub) Close() error {
	m := s.m
	m.mu.Lock()
	list := m.subs[s.id]
	for i, x := range list {
		if x == s {
			// Copy rather than splice: a Publish may be iterating the old slice.
			next := make([]*memSub, 0, len(list)-1)
			next = append(next, list[:i]...)
			next = append(next, list[i+1:]...)
			if len(next) == 0 {
				delete(m.subs, s.id)
			} else {
				m.subs[s.id] = next
			}
			break
		}
	}
	m.mu.Unlock()
	s.stop()
	return nil
}
