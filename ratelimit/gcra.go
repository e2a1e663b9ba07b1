package ratelimit

import "time"

// gcra is one step of the generic cell rate algorithm, the same arithmetic
// as redis_rate v10's allowN script with a cost of 1, in integer nanoseconds
// instead of float seconds. now and tat are nanoseconds on one clock; tat is
// the key's theoretical arrival time (the stored state), or anything ≤ now
// for a key with no state. l must be normalized and not zero.
//
// It returns the Result and the TAT to store when the event is allowed (a
// denied event changes nothing, as in the script).
func gcra(now, tat int64, l Limit) (Result, int64) {
	e := int64(l.Interval())
	burstOffset := e * int64(l.Burst)
	tat = max(tat, now)
	newTAT := tat + e
	allowAt := newTAT - burstOffset
	diff := now - allowAt
	if diff < 0 {
		return Result{
			Limit:      l,
			RetryAfter: time.Duration(-diff),
			ResetAfter: time.Duration(tat - now),
		}, tat
	}
	return Result{
		Allowed:    true,
		Limit:      l,
		Remaining:  int(diff / e),
		ResetAfter: time.Duration(newTAT - now),
	}, newTAT
}
