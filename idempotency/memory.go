package idempotency

import (
	"context"
	"maps"
	"sync"
	"time"
)

// Memory is the Store of one instance (no Redis). It keeps what Redis
// keeps, with the same bounds, on its Config.Now clock; records leave
// when their TTL ends (looked for at every call, oldest first).
type Memory struct {
	cfg     Config
	changed signal

	mu     sync.Mutex
	scopes map[string]map[string]*memRecord // scope → key → record
	// expiry lists records by their end, oldest first (every end is a
	// call's now plus the one TTL, so appending keeps the order); an entry
	// whose record has since been given another end is skipped.
	expiry []memEnd
}

type memRecord struct {
	record
	leaseEnd time.Time // while running
	end      time.Time // the record leaves the scope's count
}

type memEnd struct {
	scope, key string
	end        time.Time
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory store.
func NewMemory(cfg Config) *Memory {
	return &Memory{cfg: cfg.withDefaults(), scopes: map[string]map[string]*memRecord{}}
}

// expireLocked drops the records whose TTL has ended.
func (m *Memory) expireLocked(now time.Time) {
	n := 0
	for _, e := range m.expiry {
		if e.end.After(now) {
			break
		}
		n++
		if r := m.scopes[e.scope][e.key]; r != nil && r.end.Equal(e.end) {
			delete(m.scopes[e.scope], e.key)
			if len(m.scopes[e.scope]) == 0 {
				delete(m.scopes, e.scope)
			}
		}
	}
	m.expiry = m.expiry[n:]
}

// liveLocked is key's record, if it holds the key: a running claim whose
// lease ended does not (its place in the count stays until its end, as
// in Redis).
func (m *Memory) liveLocked(scope, key string, now time.Time) *memRecord {
	r := m.scopes[scope][key]
	if r == nil || (!r.done && !r.leaseEnd.After(now)) {
		return nil
	}
	return r
}

// Begin implements Store.
func (m *Memory) Begin(_ context.Context, scope, key, fp string) (State, error) {
	if err := checkScope(scope); err != nil {
		return State{}, err
	}
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked(now)
	if r := m.liveLocked(scope, key, now); r != nil {
		switch {
		case r.fp != fp:
			return State{Kind: Mismatch}, nil
		case r.done:
			return State{Kind: Done, Answer: copyAnswer(r.answer)}, nil
		}
		return State{Kind: Running, Token: r.token}, nil
	}
	keys := m.scopes[scope]
	if _, ok := keys[key]; !ok && len(keys) >= m.cfg.MaxKeys {
		return State{Kind: Full}, nil
	}
	if keys == nil {
		keys = map[string]*memRecord{}
		m.scopes[scope] = keys
	}
	r := &memRecord{record: record{fp: fp, token: newToken()}, leaseEnd: now.Add(m.cfg.Lease), end: now.Add(m.cfg.TTL)}
	keys[key] = r
	m.expiry = append(m.expiry, memEnd{scope, key, r.end})
	return State{Kind: Claimed, Token: r.token}, nil
}

// heldLocked is the running claim token of key, if it still holds it.
func (m *Memory) heldLocked(scope, key, token string, now time.Time) *memRecord {
	r := m.liveLocked(scope, key, now)
	if r == nil || r.done || r.token != token {
		return nil
	}
	return r
}

// Renew implements Store.
func (m *Memory) Renew(_ context.Context, scope, key, token string) error {
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.heldLocked(scope, key, token, now)
	if r == nil {
		return ErrNotHeld
	}
	r.leaseEnd = now.Add(m.cfg.Lease)
	return nil
}

// Complete implements Store.
func (m *Memory) Complete(_ context.Context, scope, key, token string, a Answer) error {
	if err := m.cfg.checkAnswer(a); err != nil {
		return err
	}
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.heldLocked(scope, key, token, now)
	if r == nil {
		return ErrNotHeld
	}
	r.done, r.answer = true, copyAnswer(a)
	r.end = now.Add(m.cfg.TTL)
	m.expiry = append(m.expiry, memEnd{scope, key, r.end})
	m.changed.fire()
	return nil
}

// Release implements Store.
func (m *Memory) Release(_ context.Context, scope, key, token string) error {
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.heldLocked(scope, key, token, now) != nil {
		delete(m.scopes[scope], key)
		if len(m.scopes[scope]) == 0 {
			delete(m.scopes, scope)
		}
		m.changed.fire()
	}
	return nil
}

// Wait implements Store. A lease that ends on the clock is noticed at the
// next look (Config.Poll at most).
func (m *Memory) Wait(ctx context.Context, scope, key, fp, token string) (Answer, error) {
	return waitLoop(ctx, m.cfg.Poll, m.changed.wait, func() (record, bool, error) {
		now := m.cfg.Now()
		m.mu.Lock()
		defer m.mu.Unlock()
		r := m.liveLocked(scope, key, now)
		if r == nil {
			return record{}, false, nil
		}
		out := r.record
		out.answer = copyAnswer(r.answer)
		return out, true, nil
	}, fp, token)
}

// copyAnswer is a, sharing nothing with it: a caller may reuse its buffers.
func copyAnswer(a Answer) Answer {
	return Answer{Status: a.Status, Header: maps.Clone(a.Header), Body: append([]byte(nil), a.Body...)}
}
