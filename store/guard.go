package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ErrUnavailable means the store could not answer: a call timed out or could
// not reach the database, or the breaker is open after repeated failures.
// Callers answer 503 store_unavailable; the wrapped cause is for logs only,
// as it may name hosts, databases and users.
var ErrUnavailable = errors.New("the store is unavailable")

// GuardConfig configures a Guard. Zero values mean the defaults noted.
type GuardConfig struct {
	// Timeout bounds one call (a lookup, a single write). Default 1.5s:
	// a never-seen API key gets its 503 within it while the database stalls.
	Timeout time.Duration
	// WriteTimeout bounds the writer's batches (WriteTasks and WriteUsage
	// of more than one item, ApplyOutcomes), which may legitimately take
	// longer. Default 10s.
	WriteTimeout time.Duration
	// Failures is how many consecutive failed calls open the breaker.
	// Default 3.
	Failures int
	// ProbeInterval is how often an open breaker pings the store to see
	// whether it answers again. Default 500ms.
	ProbeInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c GuardConfig) withDefaults() GuardConfig {
	if c.Timeout <= 0 {
		c.Timeout = 1500 * time.Millisecond
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.Failures <= 0 {
		c.Failures = 3
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// BreakerState is the state of a Guard's breaker.
type BreakerState int

const (
	// BreakerClosed: calls go to the store, each under its deadline.
	BreakerClosed BreakerState = iota
	// BreakerOpen: calls fail at once with ErrUnavailable while a probe
	// pings the store in the background.
	BreakerOpen
)

func (s BreakerState) String() string {
	if s == BreakerOpen {
		return "open"
	}
	return "closed"
}

// Guard wraps a Store so that a stalled database is never a hang (invariant
// 14): every call carries a deadline, and after Failures
// consecutive calls that timed out or could not reach the database the
// breaker opens and every call fails at once with ErrUnavailable, until a
// background probe (Ping) sees the store answer again. Open wraps every store
// it returns in one.
//
// A call counts as a failure only when the store did not answer: sentinel
// errors (ErrNotFound, ...) and errors PostgreSQL itself returned are
// answers, and a call whose caller gave up first counts for nothing.
type Guard struct {
	st  Store
	cfg GuardConfig
	log *slog.Logger

	mu       sync.Mutex
	state    BreakerState
	failures int // consecutive
	stopped  bool

	stop      chan struct{}
	wg        sync.WaitGroup // the probe
	closeOnce sync.Once
	closeErr  error
}

var _ Store = (*Guard)(nil)

// NewGuard wraps st. Closing the Guard closes st.
func NewGuard(st Store, cfg GuardConfig) *Guard {
	cfg = cfg.withDefaults()
	return &Guard{st: st, cfg: cfg, log: cfg.Logger, stop: make(chan struct{})}
}

// State returns the breaker's state.
func (g *Guard) State() BreakerState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

var errOpen = fmt.Errorf("store: %w (breaker open; waiting for the database to answer again)", ErrUnavailable)

// guarded runs fn under the deadline, unless the breaker is open.
func guarded[T any](g *Guard, ctx context.Context, timeout time.Duration, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if g.State() == BreakerOpen {
		return zero, errOpen
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	v, err := fn(cctx)
	cancel()
	if err == nil || answered(err) {
		g.success()
		return v, err
	}
	if ctx.Err() != nil {
		return v, err // the caller gave up: says nothing about the store
	}
	g.failure(err)
	return v, fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func guardedErr(g *Guard, ctx context.Context, timeout time.Duration, fn func(context.Context) error) error {
	_, err := guarded(g, ctx, timeout, func(c context.Context) (struct{}, error) { return struct{}{}, fn(c) })
	return err
}

// answered reports whether err is an answer of the store rather than a sign
// that it could not be reached (classify).
func answered(err error) bool { return classify(err) != classUnavailable }

func (g *Guard) success() {
	g.mu.Lock()
	g.failures = 0
	g.mu.Unlock()
}

func (g *Guard) failure(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failures++
	if g.state == BreakerOpen || g.failures < g.cfg.Failures || g.stopped {
		return
	}
	g.state = BreakerOpen
	g.log.Error("the store is not answering: failing store calls fast until it does", "failures", g.failures, "err", err)
	g.wg.Add(1)
	go g.probe()
}

// probe pings the store until it answers, then closes the breaker. One runs
// while the breaker is open; Close waits for it.
func (g *Guard) probe() {
	defer g.wg.Done()
	t := time.NewTicker(g.cfg.ProbeInterval)
	defer t.Stop()
	opened := time.Now()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
		err := g.st.Ping(ctx)
		cancel()
		if err == nil {
			g.mu.Lock()
			g.state, g.failures = BreakerClosed, 0
			g.mu.Unlock()
			g.log.Info("the store answers again", "unavailable_for", time.Since(opened).Round(time.Millisecond))
			return
		}
		g.log.Debug("store probe failed", "err", err)
	}
}

// Close stops the probe and closes the wrapped store. Idempotent.
func (g *Guard) Close() error {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.stopped = true
		g.mu.Unlock()
		close(g.stop)
		g.wg.Wait()
		g.closeErr = g.st.Close()
	})
	return g.closeErr
}

func (g *Guard) Ping(ctx context.Context) error {
	return guardedErr(g, ctx, g.cfg.Timeout, g.st.Ping)
}

func (g *Guard) CreateAccount(ctx context.Context, name, email, trust string) (Account, string, error) {
	type r struct {
		a   Account
		key string
	}
	v, err := guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (r, error) {
		a, key, err := g.st.CreateAccount(c, name, email, trust)
		return r{a, key}, err
	})
	return v.a, v.key, err
}

func (g *Guard) Account(ctx context.Context, id string) (Account, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (Account, error) { return g.st.Account(c, id) })
}

func (g *Guard) AccountByName(ctx context.Context, name string) (Account, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (Account, error) { return g.st.AccountByName(c, name) })
}

func (g *Guard) DeleteAccount(ctx context.Context, id string) error {
	return guardedErr(g, ctx, g.cfg.Timeout, func(c context.Context) error { return g.st.DeleteAccount(c, id) })
}

func (g *Guard) CreateKey(ctx context.Context, accountID string) (APIKey, string, error) {
	type r struct {
		k   APIKey
		key string
	}
	v, err := guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (r, error) {
		k, key, err := g.st.CreateKey(c, accountID)
		return r{k, key}, err
	})
	return v.k, v.key, err
}

func (g *Guard) ListKeys(ctx context.Context, accountID string) ([]APIKey, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) ([]APIKey, error) { return g.st.ListKeys(c, accountID) })
}

func (g *Guard) RevokeKey(ctx context.Context, idOrPrefix string) error {
	return guardedErr(g, ctx, g.cfg.Timeout, func(c context.Context) error { return g.st.RevokeKey(c, idOrPrefix) })
}

func (g *Guard) Authenticate(ctx context.Context, key string) (Account, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (Account, error) { return g.st.Authenticate(c, key) })
}

func (g *Guard) AuthSeq(ctx context.Context) (int64, error) {
	return guarded(g, ctx, g.cfg.Timeout, g.st.AuthSeq)
}

func (g *Guard) WriteTasks(ctx context.Context, recs []TaskRecord) error {
	timeout := g.cfg.Timeout
	if len(recs) > 1 {
		timeout = g.cfg.WriteTimeout
	}
	return guardedErr(g, ctx, timeout, func(c context.Context) error { return g.st.WriteTasks(c, recs) })
}

func (g *Guard) WriteUsage(ctx context.Context, reps []UsageReport) error {
	timeout := g.cfg.Timeout
	if len(reps) > 1 {
		timeout = g.cfg.WriteTimeout
	}
	return guardedErr(g, ctx, timeout, func(c context.Context) error { return g.st.WriteUsage(c, reps) })
}

func (g *Guard) WriteDeadLetters(ctx context.Context, dls []DeadLetter) error {
	timeout := g.cfg.Timeout
	if len(dls) > 1 {
		timeout = g.cfg.WriteTimeout
	}
	return guardedErr(g, ctx, timeout, func(c context.Context) error { return g.st.WriteDeadLetters(c, dls) })
}

func (g *Guard) DeadLetters(ctx context.Context, limit int) ([]DeadLetter, int64, error) {
	type r struct {
		dls   []DeadLetter
		total int64
	}
	v, err := guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (r, error) {
		dls, total, err := g.st.DeadLetters(c, limit)
		return r{dls, total}, err
	})
	return v.dls, v.total, err
}

func (g *Guard) Task(ctx context.Context, id string) (TaskRecord, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (TaskRecord, error) { return g.st.Task(c, id) })
}

func (g *Guard) SetKeyLimits(ctx context.Context, idOrPrefix string, l KeyLimits) (APIKey, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (APIKey, error) { return g.st.SetKeyLimits(c, idOrPrefix, l) })
}

func (g *Guard) Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) ([]UsageRow, error) { return g.st.Usage(c, q) })
}

func (g *Guard) CountCompletedSince(ctx context.Context, t time.Time) (int64, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (int64, error) { return g.st.CountCompletedSince(c, t) })
}

func (g *Guard) RecordNode(ctx context.Context, nodeID, accountID, name string) error {
	return guardedErr(g, ctx, g.cfg.Timeout, func(c context.Context) error { return g.st.RecordNode(c, nodeID, accountID, name) })
}

func (g *Guard) ApplyOutcomes(ctx context.Context, outs []Outcome) error {
	return guardedErr(g, ctx, g.cfg.WriteTimeout, func(c context.Context) error { return g.st.ApplyOutcomes(c, outs) })
}

func (g *Guard) NodeStats(ctx context.Context, nodeIDs []string) (map[string]NodeStats, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (map[string]NodeStats, error) { return g.st.NodeStats(c, nodeIDs) })
}

func (g *Guard) AllNodeStats(ctx context.Context) ([]NodeStats, error) {
	return guarded(g, ctx, g.cfg.Timeout, g.st.AllNodeStats)
}

func (g *Guard) Suspend(ctx context.Context, nodeID string, until time.Time) error {
	return guardedErr(g, ctx, g.cfg.Timeout, func(c context.Context) error { return g.st.Suspend(c, nodeID, until) })
}

func (g *Guard) Rate(ctx context.Context, taskID, accountID string, rating int, now time.Time) ([]string, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) ([]string, error) {
		return g.st.Rate(c, taskID, accountID, rating, now)
	})
}

func (g *Guard) SaveBenchmark(ctx context.Context, nodeID string, profile []byte, at time.Time) error {
	return guardedErr(g, ctx, g.cfg.Timeout, func(c context.Context) error { return g.st.SaveBenchmark(c, nodeID, profile, at) })
}

func (g *Guard) Benchmark(ctx context.Context, nodeID string) ([]byte, time.Time, error) {
	type r struct {
		p  []byte
		at time.Time
	}
	v, err := guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (r, error) {
		p, at, err := g.st.Benchmark(c, nodeID)
		return r{p, at}, err
	})
	return v.p, v.at, err
}
