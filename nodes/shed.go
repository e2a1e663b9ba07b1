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
// and at most 1,024, which keeps the 64 that 2 cores had before the
// default followed the machine. A registration is mostly waiting on the
// store and Redis, so many per core are in progress usefully; the rest of
// a burst waits outside, told when to come back, rather than inside with
// its round trips' deadlines running (docs/BENCHMARKS.md, "A registration
// burst").
func defaultMaxRegistering(procs int) int {
	return min(max(32*procs, 32), 1024)
}

func defaultMaxRegisteringHere() int { return defaultMaxRegistering(runtime.GOMAXPROCS(0)) }

// shedPacer tells each registration shed at the door when to come back.
// It keeps a virtual queue of the nodes it has turned away, counted in
// turns: a turn comes each time a slot frees up, about every hold/slots
// (a slot is held for about hold). Each node shed is given the turn after
// the last one promised, so that a burst of thousands comes back spread
// over the time the instance needs to register them instead of all at
// once again. The queue is kept in turns rather than as a time, so that
// when registrations speed up (the first moments of a burst are the
// slowest: cold caches, and the sheds themselves) the turns promised next
// come sooner.
type shedPacer struct {
	slots int
	rand  func() float64 // [0, 1)

	mu     sync.Mutex
	hold   time.Duration // moving average of how long a registration holds its slot
	queued float64       // turns promised and not yet come, as of at
	at     time.Time
}

func newShedPacer(slots int) *shedPacer {
	return &shedPacer{slots: slots, rand: rand.Float64, hold: firstHold}
}

// held records that a registration held its slot for d.
func (p *shedPacer) held(d time.Duration) {
	p.mu.Lock()
	// An average over about the last 16 registrations: it follows a burst
	// that slows the instance down, or a registration path that speeds up
	// again, within a fraction of a second.
	p.hold += (d - p.hold) / 16
	p.mu.Unlock()
}

// shed returns the wait to tell one more registration turned away at now.
func (p *shedPacer) shed(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if every := turn(p.hold, p.slots); now.After(p.at) {
		p.queued = max(p.queued-float64(now.Sub(p.at))/float64(every), 0) // the turns that came meanwhile
		p.at = now
	}
	wait, queued := retryAfter(p.queued, p.hold, p.slots, p.rand())
	p.queued = queued
	return wait
}

// turn is how often a slot frees up: every hold/slots (at least 1 µs).
func turn(hold time.Duration, slots int) time.Duration {
	return max(hold/time.Duration(max(slots, 1)), time.Microsecond)
}

// retryAfter is the wait for one more registration shed, and the virtual
// queue's new length, given its length in turns (queued), how long a
// registration holds its slot (hold), how many slots there are, and a
// random number in [0, 1) for the jitter.
//
// The node's turn is the one after the last promised, and none comes
// sooner than minRetryAfter; its wait is jittered by ±10 % so that the
// nodes of several instances, or of a clock-aligned restart, do not meet
// again. A queue longer than maxRetryAfter is not extended: the node is
// told a random wait between half of it and all of it, which spreads those
// that come back early (clients that ignore the hint keep the queue long)
// without promising turns nobody can keep.
func retryAfter(queued float64, hold time.Duration, slots int, jitter float64) (time.Duration, float64) {
	every := turn(hold, slots)
	q := max(queued, float64(minRetryAfter)/float64(every)) + 1
	wait := time.Duration(q * float64(every))
	if wait > maxRetryAfter {
		return maxRetryAfter/2 + time.Duration(jitter*float64(maxRetryAfter/2)), queued
	}
	wait = time.Duration(float64(wait) * (0.9 + 0.2*jitter))
	return min(max(wait, minRetryAfter), maxRetryAfter), q
}
