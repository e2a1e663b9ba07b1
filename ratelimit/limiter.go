package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Errors returned by Limiter implementations. Other failures (Redis
// unreachable, a cancelled context) are wrapped with a "ratelimit:" prefix.
var (
	// ErrInvalidLimit is returned for a Limit that no GCRA can apply: a
	// negative Burst, a Period shorter than one nanosecond per event, or a
	// burst window (Period/Rate*Burst) too long to count in nanoseconds.
	ErrInvalidLimit = errors.New("ratelimit: invalid limit")
	// ErrClosed is returned by Allow after Close.
	ErrClosed = errors.New("ratelimit: limiter closed")
)

// Limit is a rate: Rate events per Period, with Burst allowed at once.
// The zero Limit means "no limit".
type Limit struct {
	Rate   int
	Period time.Duration
	Burst  int // 0 means Rate
}

// PerSecond is a Limit of n per second with a burst of n.
func PerSecond(n int) Limit { return Limit{Rate: n, Period: time.Second, Burst: n} }

// PerMinute is a Limit of n per minute with a burst of n.
func PerMinute(n int) Limit { return Limit{Rate: n, Period: time.Minute, Burst: n} }

// PerHour is a Limit of n per hour with a burst of n.
func PerHour(n int) Limit { return Limit{Rate: n, Period: time.Hour, Burst: n} }

// IsZero reports whether l imposes no limit.
func (l Limit) IsZero() bool { return l.Rate <= 0 || l.Period <= 0 }

// Interval is the GCRA emission interval, Period/Rate: the time one event
// "costs", and so the longest a denied caller ever has to wait. It is 0 for
// the zero Limit.
func (l Limit) Interval() time.Duration {
	if l.IsZero() {
		return 0
	}
	return l.Period / time.Duration(l.Rate)
}

// Validate reports, wrapping ErrInvalidLimit, why l cannot be applied. The
// zero Limit is valid. Call it at boot on configured limits so that a bad
// one is refused there rather than failing (open) on every request.
func (l Limit) Validate() error {
	_, err := l.normalize()
	return err
}

// normalize fills the default Burst and checks l; both implementations call
// it so they accept and refuse the same limits.
func (l Limit) normalize() (Limit, error) {
	if l.IsZero() {
		return l, nil
	}
	if l.Burst < 0 {
		return l, fmt.Errorf("%w: burst %d is negative (0 means the rate)", ErrInvalidLimit, l.Burst)
	}
	if l.Burst == 0 {
		l.Burst = l.Rate
	}
	e := l.Interval()
	if e <= 0 {
		return l, fmt.Errorf("%w: %d per %s is more than one event per nanosecond", ErrInvalidLimit, l.Rate, l.Period)
	}
	// The bucket spans e*Burst; keep it (and the TAT beyond now) well inside
	// int64 nanoseconds so the Memory arithmetic cannot overflow.
	if int64(l.Burst) > math.MaxInt64/4/int64(e) {
		return l, fmt.Errorf("%w: burst %d of %s each spans too long", ErrInvalidLimit, l.Burst, e)
	}
	return l, nil
}

// Result is the answer to one Allow.
type Result struct {
	Allowed    bool
	Limit      Limit         // the limit applied, with Burst filled in
	Remaining  int           // events still allowed right now
	RetryAfter time.Duration // when not allowed: how long until one more is (else 0)
	ResetAfter time.Duration // how long until the bucket is full again
}

// Limiter counts events per key with GCRA. Memory and Redis implement it, and
// one behavioural suite runs against both. Keys are namespaced by the caller.
//
// Allow with the zero Limit always allows and touches no state. An invalid
// Limit returns ErrInvalidLimit; Allow after Close returns ErrClosed. Close
// is idempotent.
type Limiter interface {
	Allow(ctx context.Context, key string, l Limit) (Result, error)
	Close() error
}
