package nodes

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"time"
)

// The bounds of the wait a shed registration is told (retry_after_ms in
// its close 1013's reason; docs/PROTOCOL.md, "Close codes").
const (
	minRetryAfter = 100 * time.Millisecond
	maxRetryAfter = 30 * time.Second
)

// firstHold is what a registration is assumed to hold its slot for before
// any has finished here: about what one takes on a quiet instance with
// PostgreSQL and Redis on the same host.
const firstHold = 20 * time.Millisecond

// defaultMaxRegistering is MaxRegistering's default for a process that may
// run procs goroutines at once (GOMAXPROCS): 32 per core, at least 32
// and at most 1,024. A registration is mostly waiting on the store and
// Redis, so more than one per core are in progress usefully; past a few
// dozen per core they only queue for the CPU, each holding its round
// trips' deadlines while it does (docs/BENCHMARKS.md, "A registration
// burst").
func defaultMaxRegistering(procs int) int {
	return min(max(32*procs, 32), 1024)
}

func defaultMaxRegisteringHere() int { return defaultMaxRegistering(runtime.GOMAXPROCS(0)) }

// shedPacer tells each registration shed at the door when to come back.
// It keeps a virtual queue of the nodes it has turned away: each is given
// the next turn after the last one promised, turns coming as fast as the
// slots free up (a slot is held for about hold, and there are slots of
// them), so that a burst of thousands comes back spread over the time the
// instance needs to register them instead of all at once again.
type shedPacer struct {
	slots int
	rand  func() float64 // [0, 1)

	mu      sync.Mutex
	hold    time.Duration // moving average of how long a registration holds its slot
	horizon time.Time     // the turn last promised
}

func newShedPacer(slots int) *shedPacer {
	return &shedPacer{slots: slots, rand: rand.Float64, hold: firstHold}
}

// held records that a registration held its slot for d.
func (p *shedPacer) held(d time.Duration) {
	p.mu.Lock()
	// An average over about the last 16 registrations: it follows a burst
	// that slows the instance down within a fraction of a second.
	p.hold += (d - p.hold) / 16
	p.mu.Unlock()
}

// shed returns the wait to tell one more registration turned away at now.
func (p *shedPacer) shed(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	wait, horizon := retryAfter(now, p.horizon, p.hold, p.slots, p.rand())
	p.horizon = horizon
	return wait
}

// retryAfter is the wait for one more registration shed at now, and the
// virtual queue's new horizon, given the turn last promised (horizon), how
// long a registration holds its slot (hold), how many slots there are, and
// a random number in [0, 1) for the jitter.
//
// Slots free up about every hold/slots: the node's turn is that long after
// the last one promised (or after minRetryAfter from now, if that is
// later), jittered by ±10 % so that the nodes of several instances, or of
// a clock-aligned restart, do not meet again. A queue longer than
// maxRetryAfter is not extended: the node is told a random wait between
// half of it and all of it, which spreads those that come back early
// (clients that ignore the hint keep the queue long) without promising
// turns nobody can keep.
func retryAfter(now, horizon time.Time, hold time.Duration, slots int, jitter float64) (time.Duration, time.Time) {
	every := hold / time.Duration(max(slots, 1))
	turn := horizon
	if earliest := now.Add(minRetryAfter); turn.Before(earliest) {
		turn = earliest
	}
	turn = turn.Add(every)
	wait := turn.Sub(now)
	if wait > maxRetryAfter {
		return maxRetryAfter/2 + time.Duration(jitter*float64(maxRetryAfter/2)), horizon
	}
	wait = time.Duration(float64(wait) * (0.9 + 0.2*jitter))
	return min(max(wait, minRetryAfter), maxRetryAfter), turn
}
