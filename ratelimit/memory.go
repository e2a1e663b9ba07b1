package ratelimit

import (
	"context"
	"sync"
	"time"
)

// MemoryConfig configures a Memory limiter. The zero value is ready to use.
type MemoryConfig struct {
	// SweepInterval is how often the janitor drops keys whose bucket is full
	// again (they carry no information). Default 1m.
	SweepInterval time.Duration
	// Now is the clock. Default time.Now; tests pass a fake one.
	Now func() time.Time
}

func (c MemoryConfig) withDefaults() MemoryConfig {
	if c.SweepInterval <= 0 {
		c.SweepInterval = time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// shrinkFloor is the map size below which the janitor never bothers to
// rebuild the map: small maps cost little even when mostly empty.
const shrinkFloor = 1024

// Memory is the in-process Limiter: GCRA over a map of keys, each holding
// only its theoretical arrival time (TAT). It is exact for one process and
// knows nothing of other instances; a cluster uses Redis (invariant 8).
//
// A key whose TAT is in the past has a full bucket, which is the same as no
// entry at all, so the janitor drops such keys every SweepInterval: memory
// is bounded by the keys active within roughly one burst window.
type Memory struct {
	now  func() time.Time
	base time.Time // TATs are nanoseconds since base (monotonic with time.Now)

	mu      sync.Mutex
	buckets map[string]*bucket
	peak    int   // largest len(buckets) since the map was last rebuilt
	last    int64 // latest clock reading used, so time never runs backwards
	closed  bool

	interval   time.Duration
	stop       chan struct{}
	done       chan struct{}
	closeOnce  sync.Once
	afterSweep func() // test hook, called by the janitor after each sweep
}

// bucket is a pointer so that Allow on a known key is one map lookup and
// an in-place update, with no allocation.
type bucket struct{ tat int64 }

var _ Limiter = (*Memory)(nil)

// NewMemory returns a Memory limiter and starts its janitor; Close stops it.
func NewMemory(cfg MemoryConfig) *Memory {
	return newMemory(cfg, nil)
}

func newMemory(cfg MemoryConfig, afterSweep func()) *Memory {
	cfg = cfg.withDefaults()
	m := &Memory{
		now:        cfg.Now,
		base:       cfg.Now(),
		buckets:    make(map[string]*bucket),
		interval:   cfg.SweepInterval,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		afterSweep: afterSweep,
	}
	go m.janitor()
	return m
}

func (m *Memory) clock() int64 { return int64(m.now().Sub(m.base)) }

// advanceLocked returns the later of now and the latest time any caller has
// used, and records it; m.mu must be held.
func (m *Memory) advanceLocked(now int64) int64 {
	if now < m.last {
		return m.last
	}
	m.last = now
	return now
}

// Allow implements Limiter. It never blocks on I/O, so ctx is unused.
func (m *Memory) Allow(_ context.Context, key string, l Limit) (Result, error) {
	l, err := l.normalize()
	if err != nil {
		return Result{Limit: l}, err
	}
	if l.IsZero() {
		return Result{Allowed: true, Limit: l}, nil
	}
	// The clock is read before taking the lock to keep the critical section
	// short, then clamped so that time never runs backwards across calls:
	// a goroutine that read the clock before another stored a TAT would
	// otherwise be told to wait longer than one interval.
	now := m.clock()

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Result{Limit: l}, ErrClosed
	}
	now = m.advanceLocked(now)
	b := m.buckets[key]
	if b == nil {
		res, tat := gcra(now, now, l)
		if res.Allowed {
			m.buckets[key] = &bucket{tat: tat}
			m.peak = max(m.peak, len(m.buckets))
		}
		return res, nil
	}
	res, tat := gcra(now, b.tat, l)
	b.tat = tat
	return res, nil
}

// Len returns the number of keys currently held (for metrics and tests).
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.buckets)
}

// Close implements Limiter: it stops the janitor, waits for it and drops
// every key. It is idempotent.
func (m *Memory) Close() error {
	m.closeOnce.Do(func() {
		close(m.stop)
		m.mu.Lock()
		m.closed = true
		m.buckets = nil
		m.mu.Unlock()
	})
	<-m.done
	return nil
}

func (m *Memory) janitor() {
	defer close(m.done)
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.sweep()
			if m.afterSweep != nil {
				m.afterSweep()
			}
		}
	}
}

// sweep drops every key whose bucket is full again. It holds the lock for
// one pass over the map: at a million keys that is a pause of milliseconds
// once per SweepInterval, which the hot path can afford.
func (m *Memory) sweep() {
	now := m.clock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	now = m.advanceLocked(now)
	for k, b := range m.buckets {
		if b.tat <= now {
			delete(m.buckets, k)
		}
	}
	// Go maps never give back their buckets; after a spike of keys has
	// drained, rebuild the map so memory follows the live set down.
	if m.peak >= shrinkFloor && len(m.buckets) < m.peak/4 {
		fresh := make(map[string]*bucket, len(m.buckets))
		for k, b := range m.buckets {
			fresh[k] = b
		}
		m.buckets = fresh
		m.peak = len(fresh)
	}
}
