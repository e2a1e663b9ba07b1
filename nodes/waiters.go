package nodes

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"
)

// Waiters queues the requests waiting for a free slot, one queue per
// capability, first come first served. A freed slot wakes the first waiter
// of each of its node's capabilities, not every waiter: with thousands
// waiting, waking them all on each slot (each to pick again and all but one
// to find nothing) took more CPU than the tasks themselves, which freed
// slots more slowly still (issue 13: at 2,000 requests/s on one instance,
// 54 % of its CPU went into waiters picking and re-arming their timers).
//
// A woken waiter that finds no slot (a request that was not waiting took
// it) goes back to the front. Only the first waiter of a queue rechecks on
// a timer, for slots whose freeing was not signalled (a remote node whose
// owner has not written it yet); when it leaves, the next is nudged to
// take its place and its timer. A wake given and not used (the waiter gave
// up) goes on to the next waiter. Slots go to the front of the queue only,
// so waiters are served in order.
type Waiters struct {
	n  atomic.Int32 // waiters queued: Wake costs nothing when none is
	mu sync.Mutex
	q  map[string]*list.List // capability → *Waiter, oldest first
}

// Waiter is one request's place in a queue.
type Waiter struct {
	// C receives when a slot may have freed for this waiter; the waiter is
	// then out of the queue until it waits again.
	C          chan struct{}
	ws         *Waiters
	capability string
	since      time.Time     // when it began waiting
	e          *list.Element // its place while queued; nil once woken or done
	woken      bool          // taken out of the queue by a wake it has not answered
}

// NewWaiters returns empty queues.
func NewWaiters() *Waiters { return &Waiters{q: map[string]*list.List{}} }

// Wait queues a new waiter for capability at the back of its queue.
func (ws *Waiters) Wait(capability string) *Waiter {
	w := &Waiter{C: make(chan struct{}, 1), ws: ws, capability: capability, since: time.Now()}
	ws.mu.Lock()
	l := ws.q[capability]
	if l == nil {
		l = list.New()
		ws.q[capability] = l
	}
	w.e = l.PushBack(w)
	ws.n.Add(1)
	ws.mu.Unlock()
	return w
}

// Again puts a woken waiter that found no slot back at the front of its
// queue; a waiter still queued stays where it is. It reports whether the
// waiter is first in its queue (and so the one to recheck on a timer).
func (w *Waiter) Again() (first bool) {
	ws := w.ws
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.q[w.capability]
	if w.e == nil {
		// Drop a wake that came after the waiter looked: it looks again now.
		select {
		case <-w.C:
		default:
		}
		w.woken = false
		if l == nil {
			l = list.New()
			ws.q[w.capability] = l
		}
		w.e = l.PushFront(w)
		ws.n.Add(1)
	}
	return l.Front() == w.e
}

// Done ends the wait: the waiter got a slot (served), or gives up. The
// new first waiter of the queue is nudged, to look once and keep its
// place with the first waiter's timer (the freeing of a remote node's slot
// is not always signalled). A wake the waiter was given and did not use
// (it gives up) goes on to the next waiter: the slot is theirs.
func (w *Waiter) Done(served bool) {
	ws := w.ws
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w.e != nil {
		ws.removeLocked(w)
		ws.nudgeLocked(w.capability)
		return
	}
	if w.woken {
		w.woken = false
		if served {
			ws.nudgeLocked(w.capability)
		} else {
			ws.wakeLocked(w.capability, 1)
		}
	}
}

// Wake wakes up to n waiters of each capability (a node with them has n
// slots more). It never blocks.
func (ws *Waiters) Wake(capabilities []string, n int) {
	if ws.n.Load() == 0 || n <= 0 {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, c := range capabilities {
		ws.wakeLocked(c, n)
	}
}

// Len is the number of waiters queued.
func (ws *Waiters) Len() int { return int(ws.n.Load()) }

// WaitStat is one capability's queue: how many wait, and since when the
// one waiting longest has.
type WaitStat struct {
	N     int
	Since time.Time
}

// Waiting returns the queues that are not empty, by capability (a waiter
// woken a moment ago and looking again is not in them).
func (ws *Waiters) Waiting() map[string]WaitStat {
	out := map[string]WaitStat{}
	if ws.n.Load() == 0 {
		return out
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for c, l := range ws.q {
		st := WaitStat{N: l.Len()}
		for e := l.Front(); e != nil; e = e.Next() {
			if w := e.Value.(*Waiter); st.Since.IsZero() || w.since.Before(st.Since) {
				st.Since = w.since
			}
		}
		out[c] = st
	}
	return out
}

func (ws *Waiters) wakeLocked(capability string, n int) {
	l := ws.q[capability]
	for ; n > 0 && l != nil && l.Len() > 0; n-- {
		w := l.Front().Value.(*Waiter)
		ws.removeLocked(w)
		w.woken = true
		select {
		case w.C <- struct{}{}:
		default:
		}
	}
}

// nudgeLocked signals the first waiter of a queue without taking it out:
// it looks again and keeps its place.
func (ws *Waiters) nudgeLocked(capability string) {
	if l := ws.q[capability]; l != nil && l.Len() > 0 {
		select {
		case l.Front().Value.(*Waiter).C <- struct{}{}:
		default:
		}
	}
}

func (ws *Waiters) removeLocked(w *Waiter) {
	l := ws.q[w.capability]
	l.Remove(w.e)
	w.e = nil
	ws.n.Add(-1)
	if l.Len() == 0 {
		delete(ws.q, w.capability)
	}
}
