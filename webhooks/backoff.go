package webhooks

import "time"

// Backoff is the wait after a delivery's attempt-th failed attempt (from 1):
// base doubling per attempt, capped at max. It is the schedule without
// jitter; Dispatcher spreads it with Jitter so that deliveries that failed
// together (a receiver down) do not all come back together.
func Backoff(attempt int, base, max time.Duration) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		if d >= max/2 {
			return max
		}
		d *= 2
	}
	return min(d, max)
}

// Jitter spreads d over [3/4 d, 5/4 d) by r in [0, 1).
func Jitter(d time.Duration, r float64) time.Duration {
	return d - d/4 + time.Duration(r*float64(d/2))
}
