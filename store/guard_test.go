package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-dev/switchyard/store"
)

// stallStore answers Authenticate and Ping, or stalls them (blocking until
// the call's context ends, as a SIGSTOPped database does), and counts the
// calls that reached it.
type stallStore struct {
	store.Store // nil: only the methods below are called
	stalled     atomic.Bool
	calls       atomic.Int64
	pings       atomic.Int64
}

func (s *stallStore) wait(ctx context.Context) error {
	if s.stalled.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *stallStore) Authenticate(ctx context.Context, key string) (store.Account, error) {
	s.calls.Add(1)
	if err := s.wait(ctx); err != nil {
		return store.Account{}, err
	}
	if key == "unknown" {
		return store.Account{}, store.ErrNotFound
	}
	return store.Account{ID: "acct"}, nil
}

func (s *stallStore) Ping(ctx context.Context) error {
	s.pings.Add(1)
	return s.wait(ctx)
}

func (s *stallStore) Close() error { return nil }

func TestGuardBreakerStates(t *testing.T) {
	inner := &stallStore{}
	const timeout = 50 * time.Millisecond
	g := store.NewGuard(inner, store.GuardConfig{Timeout: timeout, Failures: 3, ProbeInterval: 20 * time.Millisecond, Logger: quiet})
	defer g.Close()
	ctx := context.Background()

	// Closed: answers pass through, and "not found" is an answer, not a failure.
	for range 5 {
		if _, err := g.Authenticate(ctx, "unknown"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown key: %v, want ErrNotFound", err)
		}
	}
	if g.State() != store.BreakerClosed {
		t.Fatalf("state %v after answers, want closed", g.State())
	}

	// Stalled: each call ends at its deadline with ErrUnavailable; the third
	// consecutive one opens the breaker.
	inner.stalled.Store(true)
	for i := range 3 {
		start := time.Now()
		_, err := g.Authenticate(ctx, "k")
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("stalled call %d: %v, want ErrUnavailable", i, err)
		}
		if d := time.Since(start); d > timeout+time.Second {
			t.Fatalf("stalled call %d took %v; the deadline is %v", i, d, timeout)
		}
		if want := store.BreakerClosed; i < 2 && g.State() != want {
			t.Fatalf("state %v after %d failures, want %v", g.State(), i+1, want)
		}
	}
	if g.State() != store.BreakerOpen {
		t.Fatalf("state %v after 3 failures, want open", g.State())
	}

	// Open: calls fail at once without reaching the store (the store is
	// still stalled: a call that reached it would wait out its deadline).
	// Counted, not timed: how long 100 calls take is the machine's business.
	before := inner.calls.Load()
	for range 100 {
		if _, err := g.Authenticate(ctx, "k"); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("open breaker: %v, want ErrUnavailable", err)
		}
	}
	if n := inner.calls.Load() - before; n != 0 {
		t.Fatalf("%d calls reached the store with the breaker open", n)
	}

	// The probe keeps pinging while the store stalls, and the breaker stays open.
	waitFor(t, func() bool { return inner.pings.Load() >= 2 })
	if g.State() != store.BreakerOpen {
		t.Fatalf("state %v while the probe fails, want open", g.State())
	}

	// The store answers again: the probe closes the breaker and calls pass.
	inner.stalled.Store(false)
	waitFor(t, func() bool { return g.State() == store.BreakerClosed })
	if a, err := g.Authenticate(ctx, "k"); err != nil || a.ID != "acct" {
		t.Fatalf("after recovery: %v %v", a, err)
	}
}

// A caller that gives up first says nothing about the store.
func TestGuardCallerCancelIsNotAFailure(t *testing.T) {
	inner := &stallStore{}
	inner.stalled.Store(true)
	g := store.NewGuard(inner, store.GuardConfig{Timeout: time.Minute, Failures: 1, Logger: quiet})
	defer g.Close()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, err := g.Authenticate(ctx, "k")
		cancel()
		if err == nil || errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("canceled call: %v, want the caller's context error", err)
		}
	}
	if g.State() != store.BreakerClosed {
		t.Fatal("callers that gave up opened the breaker")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pgErrStore fails Authenticate with a given PostgreSQL error.
type pgErrStore struct {
	store.Store
	err error
}

func (s *pgErrStore) Authenticate(context.Context, string) (store.Account, error) {
	return store.Account{}, s.err
}
func (s *pgErrStore) Close() error { return nil }

// PostgreSQL's own errors are answers, except those saying it cannot serve
// (shutting down, out of connections, ...): only those open the breaker.
func TestGuardClassifiesPostgresErrors(t *testing.T) {
	for _, tc := range []struct {
		code        string
		unavailable bool
	}{
		{"23505", false}, // unique violation
		{"22021", false}, // invalid byte sequence (a NUL)
		{"57P01", true},  // terminating connection due to administrator command
		{"57P03", true},  // the database system is starting up
		{"53300", true},  // too many connections
		{"08006", true},  // connection failure
	} {
		inner := &pgErrStore{err: &pgconn.PgError{Code: tc.code}}
		g := store.NewGuard(inner, store.GuardConfig{Failures: 2, Logger: quiet})
		_, err := g.Authenticate(context.Background(), "k")
		_, _ = g.Authenticate(context.Background(), "k")
		if got := errors.Is(err, store.ErrUnavailable); got != tc.unavailable {
			t.Errorf("SQLSTATE %s: unavailable %v, want %v", tc.code, got, tc.unavailable)
		}
		if open := g.State() == store.BreakerOpen; open != tc.unavailable {
			t.Errorf("SQLSTATE %s: breaker open %v after two, want %v", tc.code, open, tc.unavailable)
		}
		_ = g.Close()
	}
}
