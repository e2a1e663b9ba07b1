package sdk

import (
	"math/rand/v2"
	"time"
)

// backoff is the reconnect delay: it doubles from min to max after each
// failed attempt and is reset by a successful registration. Each delay is
// jittered into [d/2, d] so that nodes dropped together by one server do not
// come back in lockstep.
type backoff struct {
	min, max, cur time.Duration
	rand          func() float64 // [0, 1); replaced in tests
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{min: min, max: max, cur: min, rand: rand.Float64}
}

// next returns the delay before the next attempt and doubles the one after.
func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	return d/2 + time.Duration(b.rand()*float64(d-d/2))
}

func (b *backoff) reset() { b.cur = b.min }
