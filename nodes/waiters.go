package nodes

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"
)

// Waiters queues the requests waiting for a free slot, one queue per
// capability. A freed slot wakes the next waiter of each of its node's
// capabilities, not every waiter: with thousands waiting, waking them all
// on each slot (each to pick again and all but one to find nothing) took
// more CPU than the tasks themselves, which freed slots more slowly still
// (at 2,000 requests/s on one instance, 54 % of its CPU went
// into waiters picking and re-arming their timers).
//
// Who is next: the highest priority first; within a priority,
// the accounts waiting take turns, one waiter each, so an account with
// 200 waiting cannot starve one with 5; within an account, the oldest.
//
// A woken waiter that finds no slot (a request that was not waiting took
// it) goes back to the front, ahead of every turn. Only the first waiter
// of a queue rechecks on a timer, for slots whose freeing was not
// signalled (a remote node whose owner has not written it yet); when it
// leaves, the next is nudged to take its place and its timer. A wake given
// and not used (the waiter gave up) goes on to the next waiter. Slots go
// to the front of the queue only, so waiters are served in that order.
//
// A freed slot wakes the first waiter its node can serve: a waiter whose
// request the node cannot take (it demands official nodes, or labels the
// node lacks, or only this instance's nodes) is passed over and keeps its
// place, so it does not hold up the waiters behind it until it is served
// or gives up. Only the first maxPassOver waiters in order are looked at;
// when none of them fits, nobody is woken: the slot stays for whoever looks
// next, as it did when the first waiter was woken for a slot it could not
// take.
//
// A wake's slot is its waiter's until the waiter answers (takes the slot,
// gives up, or finds nothing and comes back): meanwhile nobody in its queue
// is first, so nobody looks for a slot unsignalled, nor is nudged. The
// waiter behind a woken one would otherwise be first as soon as the wake
// took the woken one out, and could take the slot before the woken one's
// goroutine ran (TestWaitingRequestsServedInOrder, on a busy machine).
type Waiters struct {
	n  atomic.Int32 // waiters queued: Wake costs nothing when none is
	mu sync.Mutex
	q  map[string]*queue // capability → its waiters
}

// Priorities run from 0 to MaxPriority, higher first; DefaultPriority is
// a request's that gives none.
const (
	MaxPriority     = 9
	DefaultPriority = 5
)

// Place is who waits, and how urgently: an account and a priority (0–9;
// out of range is clamped); and which nodes can serve it, so that a slot
// freed on another is not woken for it.
type Place struct {
	Account  string
	Priority int
	// Trust, Labels and LocalOnly are the request's demands: official
	// nodes only (TrustOfficial), every one of these labels, nodes
	// connected to this instance only.
	Trust     string
	Labels    map[string]string
	LocalOnly bool
}

// Freed is the node whose slots freed, as its waiters see it: what it runs,
// its trust and labels, and whether it is connected here.
type Freed struct {
	Capabilities []string
	Trust        string
	Labels       map[string]string
	Local        bool
}

// maxPassOver is how many waiters a wake looks at for one its node can
// serve. It bounds a wake's work when many wait for nodes this one is not.
const maxPassOver = 64

// serves reports whether a node freed as f can take p's request.
func (f *Freed) serves(p *Place) bool {
	return (p.Trust != TrustOfficial || f.Trust == TrustOfficial) && HasLabels(f.Labels, p.Labels) && (f.Local || !p.LocalOnly)
}

// queue is one capability's waiters: those back from a wake that found
// nothing (served first), then by priority, accounts in turn.
type queue struct {
	n int
	// woken counts the waiters woken and not yet answered (Again or Done).
	// The queue stays in Waiters.q while it is not zero.
	woken  int
	front  *list.List // *Waiter
	levels [MaxPriority + 1]*level
}

// level is one priority's accounts, next turn first.
type level struct {
	turns  *list.List // *account
	byName map[string]*account
}

// account is one account's waiters at one priority, oldest first.
type account struct {
	name    string
	waiters *list.List // *Waiter
	turn    *list.Element
}

// Waiter is one request's place in a queue.
type Waiter struct {
	// C receives when a slot may have freed for this waiter; the waiter is
	// then out of the queue until it waits again.
	C          chan struct{}
	ws         *Waiters
	capability string
	place      Place
	since      time.Time     // when it began waiting
	e          *list.Element // its place while queued; nil once woken or done
	in         *list.List    // the list e is in: the queue's front, or its account's
	woken      bool          // taken out of the queue by a wake it has not answered
	freed      Freed         // while woken: the node of its wake, passed on if it gives up
}

// NewWaiters returns empty queues.
func NewWaiters() *Waiters { return &Waiters{q: map[string]*queue{}} }

// Wait queues a new waiter for capability, behind those of its account
// and priority.
func (ws *Waiters) Wait(capability string, p Place) *Waiter {
	p.Priority = min(max(p.Priority, 0), MaxPriority)
	w := &Waiter{C: make(chan struct{}, 1), ws: ws, capability: capability, place: p, since: time.Now()}
	ws.mu.Lock()
	q := ws.queueLocked(capability)
	lv := q.levels[p.Priority]
	if lv == nil {
		lv = &level{turns: list.New(), byName: map[string]*account{}}
		q.levels[p.Priority] = lv
	}
	a := lv.byName[p.Account]
	if a == nil {
		a = &account{name: p.Account, waiters: list.New()}
		a.turn = lv.turns.PushBack(a)
		lv.byName[p.Account] = a
	}
	w.e, w.in = a.waiters.PushBack(w), a.waiters
	q.n++
	ws.n.Add(1)
	ws.mu.Unlock()
	return w
}

func (ws *Waiters) queueLocked(capability string) *queue {
	q := ws.q[capability]
	if q == nil {
		q = &queue{front: list.New()}
		ws.q[capability] = q
	}
	return q
}

// Again puts a woken waiter that found no slot back at the front of its
// queue; a waiter still queued stays where it is. It reports whether the
// waiter is first in its queue (and so the one to recheck on a timer).
func (w *Waiter) Again() (first bool) {
	ws := w.ws
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w.woken {
		ws.answeredLocked(w)
		w.freed = Freed{}
	}
	q := ws.queueLocked(w.capability)
	if w.e == nil {
		// Drop a wake that came after the waiter looked: it looks again now.
		select {
		case <-w.C:
		default:
		}
		w.e, w.in = q.front.PushFront(w), q.front
		q.n++
		ws.n.Add(1)
	}
	return q.first(w)
}

// First reports whether w is queued, first in its queue, and no wake of
// that queue is unanswered: the one waiter that may look for a slot nobody
// signalled. A waiter that has just queued looks for a slot again only
// when it is first (a slot freed before it queued went, with its wake, to
// the first); otherwise it could take a slot ahead of those queued before
// it.
func (w *Waiter) First() bool {
	ws := w.ws
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.q[w.capability]
	return w.e != nil && q != nil && q.first(w)
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
		// Served while queued (it looked on its timer, or when nudged):
		// its account's turn passes, as a woken waiter's does.
		ws.removeLocked(w, served)
		ws.nudgeLocked(w.capability)
		return
	}
	if w.woken {
		ws.answeredLocked(w)
		f := w.freed
		w.freed = Freed{}
		if served {
			ws.nudgeLocked(w.capability)
		} else {
			ws.wakeLocked(w.capability, 1, &f)
		}
	}
}

// Wake wakes up to n waiters of each of f's capabilities that f's node
// can serve (it has n slots more). It never blocks.
func (ws *Waiters) Wake(f Freed, n int) {
	if ws.n.Load() == 0 || n <= 0 {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, c := range f.Capabilities {
		ws.wakeLocked(c, n, &f)
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
	for c, q := range ws.q {
		if q.n == 0 {
			continue // kept only for a wake not yet answered
		}
		st := WaitStat{N: q.n}
		q.each(func(w *Waiter) {
			if st.Since.IsZero() || w.since.Before(st.Since) {
				st.Since = w.since
			}
		})
		out[c] = st
	}
	return out
}

// first reports whether w, queued, may look for a slot nobody signalled:
// it is next, and no wake of its queue is still unanswered.
func (q *queue) first(w *Waiter) bool { return q.woken == 0 && q.head() == w }

// answeredLocked ends w's wake: its slot is no longer held for it.
func (ws *Waiters) answeredLocked(w *Waiter) {
	w.woken = false
	q := ws.q[w.capability]
	q.woken--
	if q.n == 0 && q.woken == 0 {
		delete(ws.q, w.capability)
	}
}

// head is the waiter served next, or nil.
func (q *queue) head() *Waiter {
	if e := q.front.Front(); e != nil {
		return e.Value.(*Waiter)
	}
	for p := MaxPriority; p >= 0; p-- {
		if lv := q.levels[p]; lv != nil {
			return lv.turns.Front().Value.(*account).waiters.Front().Value.(*Waiter)
		}
	}
	return nil
}

// each calls f for every waiter queued.
func (q *queue) each(f func(*Waiter)) {
	for e := q.front.Front(); e != nil; e = e.Next() {
		f(e.Value.(*Waiter))
	}
	for _, lv := range q.levels {
		if lv == nil {
			continue
		}
		for t := lv.turns.Front(); t != nil; t = t.Next() {
			for e := t.Value.(*account).waiters.Front(); e != nil; e = e.Next() {
				f(e.Value.(*Waiter))
			}
		}
	}
}

func (ws *Waiters) wakeLocked(capability string, n int, f *Freed) {
	q := ws.q[capability]
	for ; n > 0 && q != nil && q.n > 0; n-- {
		w := q.next(f)
		if w == nil {
			return
		}
		q.woken++ // first: the queue must stay while the wake is out
		ws.removeLocked(w, true)
		w.woken, w.freed = true, *f
		select {
		case w.C <- struct{}{}:
		default:
		}
		q = ws.q[capability]
	}
}

// next is the waiter a slot of f's node goes to: the first, in the order
// waiters are served, that the node can serve, among the first maxPassOver;
// nil when none of them is. The order is head's: those back from a wake,
// then by priority, and within a priority the accounts in turn, each
// account's waiters oldest first (a waiter passed over keeps its place, and
// its account its turn).
func (q *queue) next(f *Freed) *Waiter {
	looked := 0
	fits := func(l *list.List) *Waiter {
		for e := l.Front(); e != nil && looked < maxPassOver; e = e.Next() {
			looked++
			if w := e.Value.(*Waiter); f.serves(&w.place) {
				return w
			}
		}
		return nil
	}
	if w := fits(q.front); w != nil {
		return w
	}
	for p := MaxPriority; p >= 0 && looked < maxPassOver; p-- {
		lv := q.levels[p]
		if lv == nil {
			continue
		}
		for t := lv.turns.Front(); t != nil && looked < maxPassOver; t = t.Next() {
			if w := fits(t.Value.(*account).waiters); w != nil {
				return w
			}
		}
	}
	return nil
}

// nudgeLocked signals the first waiter of a queue without taking it out:
// it looks again and keeps its place. Not while a wake is unanswered: the
// slot that wake stands for is its waiter's.
func (ws *Waiters) nudgeLocked(capability string) {
	if q := ws.q[capability]; q != nil && q.woken == 0 {
		if w := q.head(); w != nil {
			select {
			case w.C <- struct{}{}:
			default:
			}
		}
	}
}

// removeLocked takes w out of its queue. served says it leaves for a slot:
// its account's turn then passes to the next account of its priority.
func (ws *Waiters) removeLocked(w *Waiter, served bool) {
	q := ws.q[w.capability]
	w.in.Remove(w.e)
	if w.in != q.front {
		lv := q.levels[w.place.Priority]
		a := lv.byName[w.place.Account]
		switch {
		case a.waiters.Len() == 0:
			lv.turns.Remove(a.turn)
			delete(lv.byName, a.name)
			if lv.turns.Len() == 0 {
				q.levels[w.place.Priority] = nil
			}
		case served:
			lv.turns.MoveToBack(a.turn)
		}
	}
	w.e, w.in = nil, nil
	q.n--
	ws.n.Add(-1)
	if q.n == 0 && q.woken == 0 {
		delete(ws.q, w.capability)
	}
}
