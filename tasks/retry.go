package tasks

import (
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// MaxTaskRetries is the most retries a request may ask for
// (Request.Retries).
const MaxTaskRetries = 3

// Why an attempt is run again on another node (store.Retry.Reason, and the
// reason label of switchyard_tasks_retries_total).
const (
	RetryNodeDisconnected = "node_disconnected" // its socket closed, or its heartbeat lapsed
	RetryInstanceGone     = "instance_gone"     // the instance holding its socket died
	RetryNodeUnavailable  = "node_unavailable"  // it answered status "unavailable"
)

// statusUnavailable is the task_result status (ours) of a node that failed
// the task for its own sake (out of memory, its model not loaded, shutting
// down), not the request's: the task is run again elsewhere.
const statusUnavailable = "unavailable"

// A task is run again on another node when its node failed it before
// answering: the node's socket closed or its heartbeat lapsed
// (node_disconnected), the instance holding it died (instance_gone), or it
// answered "unavailable" (node_unavailable). Not when the request was at
// fault (rejected), the node answered (completed, failed), the task timed
// out, the client left, or a stream already delivered text to its client.
// The next node is one that has not failed the task, chosen as any other
// (a full cluster queues it, never past the task's deadline); with no such
// node, the request fails as the attempt did, as fast as before. The failed
// node's outcome counts against its standing once another node has the
// task; the client sees one answer, whose Outcome (and record) lists the
// retries.

// lostAttempt is the attempt that failed for its node's sake, kept until
// another node has the task: if none does, it is the request's answer.
type lostAttempt struct {
	out      Outcome
	err      error
	nodeID   string
	reason   string
	assigned time.Time
	at       time.Time
}

// retryBudget is how many retries the request may use.
func (r *run) retryBudget() int {
	n := r.req.Retries
	if n == 0 {
		n = r.d.cfg.TaskRetries
	}
	return min(max(n, 0), MaxTaskRetries)
}

// deadline is when the task's time is up: it is not run again after it.
func (r *run) deadline() time.Time {
	return r.p.created.Add(r.d.deadline(r.req))
}

// lose takes in an attempt's end and reports whether the task is to be run
// again on another node.
func (r *run) lose(nodeID string, out Outcome, err error) bool {
	why := r.lost
	r.lost = ""
	if why == "" || r.streamed || len(r.retries) >= r.retryBudget() || !time.Now().Before(r.deadline()) {
		return false
	}
	r.lostAttempt = &lostAttempt{out: out, err: err, nodeID: nodeID, reason: why, assigned: r.assigned, at: time.Now()}
	return true
}

// retried commits the lost attempt once another node has the task: the
// retry is counted and the failed node's outcome goes into its standing.
func (r *run) retried() {
	l := r.lostAttempt
	if l == nil {
		return
	}
	r.lostAttempt = nil
	lost := l.at.Sub(l.assigned).Milliseconds()
	r.retries = append(r.retries, store.Retry{NodeID: l.nodeID, Reason: l.reason, LostMs: lost})
	r.d.metrics.retries.WithLabelValues(l.reason).Inc()
	r.d.rec.RecordOutcome(store.Outcome{NodeID: l.nodeID, Account: r.req.AccountID, ElapsedMs: lost, At: l.at})
}

// failed is the request's end when it cannot go on after err: the lost
// attempt's own end when another node was being looked for (unless the
// client left meanwhile), else err.
func (r *run) failed(err error) (Outcome, error) {
	if l := r.lostAttempt; l != nil && AsError(err).Code != CodeCanceled {
		return l.out, l.err
	}
	return Outcome{}, err
}

// reasonOwnerGone is the Reason of the node_gone the watcher delivers for a
// task whose owner instance died.
const reasonOwnerGone = "owner instance gone"
