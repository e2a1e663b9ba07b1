package tasks

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Hedged requests: for a task type the operator names (Config.Hedge), a
// plain task whose node has not answered within the type's delay gets a
// second copy on another node that has a free slot; the first completed
// answer is the client's and the other copy is cancelled on its node
// (task_cancel to a node that declared it; another keeps its slot until it
// answers, as for any cancelled task). Each node's usage is metered as it
// reports it, the loser's included when it answers. Streams are not hedged
// (two streams cannot both reach one client), nor split, async or
// session-bound tasks; a hedge never waits for a slot, and a type with no
// free second node is served by its first copy alone.

// errHedgeLost is the cause of the context of a copy the other answered
// first: its cancel says "hedge lost".
var errHedgeLost = errors.New("the other copy of the hedged task answered first")

// Which copy of a hedged task answered (Outcome.Hedge).
const (
	HedgeFirst  = "first"  // the hedge went out, and the first copy won
	HedgeSecond = "second" // the hedge won
)

// hedgeSuffix makes the second copy's task id: the node and the owner see
// two tasks; the client, the record and the tracker's lookup the first id.
const hedgeSuffix = "-hedge"

// hedgeDelay is how long req's first copy may run before a second goes
// out; 0 when it is not hedged.
func (d *dispatcher) hedgeDelay(req *Request) time.Duration {
	if req.Stream || req.LocalOnly || req.Session != "" || req.subtask || len(d.cfg.Hedge) == 0 {
		return 0
	}
	return d.cfg.Hedge[req.TaskType]
}

// runHedged runs req's first copy and, if it has not answered after after,
// a second on another node; the first completed answer wins. The task is
// recorded once, as runSplit records its parts: with the node that
// answered and both copies' attempts.
func (d *dispatcher) runHedged(ctx context.Context, req Request, h Hooks, after time.Duration) (Outcome, error) {
	start := time.Now()
	type end struct {
		out      Outcome
		err      error
		second   bool
		node     string
		attempts int
	}
	ends := make(chan end, 2)
	assigned := make(chan string, 1) // the first copy's node, once it has one
	first, stopFirst := context.WithCancelCause(ctx)
	defer stopFirst(nil)
	sub := req
	sub.subtask = true
	go func() {
		var e end
		e.out, e.err = d.run(first, sub, h, func(nodeID string) {
			select {
			case assigned <- nodeID:
			default:
			}
		}, func(r *run) { e.node, e.attempts = r.nodeID, r.attempts })
		ends <- e
	}()

	var firstNode string
	select {
	case firstNode = <-assigned:
	case e := <-ends: // it ended before a node had it
		return d.endHedged(&req, start, e.out, e.err, e.node, e.attempts, "", "not_needed")
	}
	timer := time.NewTimer(after)
	defer timer.Stop()
	select {
	case e := <-ends:
		return d.endHedged(&req, start, e.out, e.err, e.node, e.attempts, "", "not_needed")
	case <-timer.C:
	}

	second, stopSecond := context.WithCancelCause(ctx)
	defer stopSecond(nil)
	hedge := req
	hedge.TaskID = req.TaskID + hedgeSuffix
	hedge.subtask, hedge.noQueue, hedge.Retries = true, true, -1
	hedge.exclude = []string{firstNode}
	var sent atomic.Bool // the second copy had a node
	go func() {
		e := end{second: true}
		e.out, e.err = d.run(second, hedge, Hooks{}, func(string) { sent.Store(true) }, func(r *run) { e.node, e.attempts = r.nodeID, r.attempts })
		ends <- e
	}()

	// The first completed answer wins; a failure waits for the other copy,
	// and when both failed the first copy's end is the answer.
	var ended [2]*end
	attempts := 0
	for range 2 {
		e := <-ends
		attempts += e.attempts
		ended[btoi(e.second)] = &e
		if e.second && !sent.Load() {
			// Counted now, not at the end: the first copy's answer may
			// be long.
			d.metrics.hedges.WithLabelValues("no_node").Inc()
		}
		if e.err != nil || e.out.Status != StatusCompleted {
			continue
		}
		won := HedgeFirst
		if e.second {
			won = HedgeSecond
			stopFirst(errHedgeLost)
			e.out.TaskID = req.TaskID
		} else {
			stopSecond(errHedgeLost)
		}
		if ended[1-btoi(e.second)] == nil {
			attempts++ // the loser, which had its node: its end is not waited for
		}
		if !sent.Load() {
			return d.endHedged(&req, start, e.out, nil, e.node, attempts, "", "")
		}
		return d.endHedged(&req, start, e.out, nil, e.node, attempts, won, won)
	}
	e := ended[0]
	if AsError(e.err).Code == CodeCanceled && ended[1].err == nil {
		e = ended[1] // the client left after the second answered
		e.out.TaskID = req.TaskID
	}
	how := "failed"
	if !sent.Load() {
		how = "" // counted as no_node
	}
	return d.endHedged(&req, start, e.out, e.err, e.node, attempts, "", how)
}

// endHedged records a hedged task once, as the client gets it (won: which
// copy answered, "" when no second copy went out or none completed), and
// counts how it went (switchyard_tasks_hedges_total's outcome).
func (d *dispatcher) endHedged(req *Request, start time.Time, out Outcome, err error, node string, attempts int, won, how string) (Outcome, error) {
	now := time.Now()
	rec := d.newRecord(req, start)
	rec.Attempts = attempts
	if node != "" {
		rec.NodeIDs = []string{node}
	}
	out.Hedge = won
	if err == nil {
		d.served.add(req.TaskType, now)
	}
	if how != "" {
		d.metrics.hedges.WithLabelValues(how).Inc()
	}
	d.record(&rec, start, now, out, err)
	return out, err
}
