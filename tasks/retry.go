package tasks

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/sdk/wire"

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
	resume   bool // the next node continues the stream
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
	if why == "" || len(r.retries) >= r.retryBudget() || !time.Now().Before(r.deadline()) {
		return false
	}
	if r.streamed {
		// Its client has text: only a node that continues it may go on
		// (and then only if its task_assign fits what a node reads).
		if r.textCapped || r.text.Len() == 0 || !r.fitsResume() {
			return false
		}
		r.resuming = true
	}
	r.lostAttempt = &lostAttempt{out: out, err: err, nodeID: nodeID, reason: why, assigned: r.assigned, at: time.Now(), resume: r.resuming}
	return true
}

// keep adds delta, which the client now has, to the stream's text, while
// a node could be told it: when a node that declared resume was among the
// stream's candidates (most fleets have none, and their streams copy
// nothing), within the result cap and the instance's budget for kept text
// (StreamBufferBytes over every stream; the run gives its share back when
// it ends). A stream whose text outgrew either cannot be continued.
func (r *run) keep(delta string) {
	if !r.resumers || r.textCapped || r.retryBudget() == 0 {
		return
	}
	n := int64(len(delta))
	if int64(r.text.Len())+n > r.d.cfg.ResultMaxBytes {
		r.dropText()
		return
	}
	if r.d.keptText.Add(n) > r.d.cfg.StreamBufferBytes {
		r.d.keptText.Add(-n)
		r.dropText()
		return
	}
	r.text.WriteString(delta)
}

// dropText forgets the stream's text and gives its budget back.
func (r *run) dropText() {
	r.textCapped = true
	r.d.keptText.Add(-int64(r.text.Len()))
	r.text = strings.Builder{}
}

// fitsResume reports whether the task_assign that continues the stream
// would fit what a node reads (wire.MaxAssignBytes), as JSON would write
// it: the owner refuses a larger one.
func (r *run) fitsResume() bool {
	const slack = 4 << 10 // the envelope, ids, task type and flags
	n := jsonLen(r.req.Content) + len(r.req.Params) + jsonLen(r.text.String()) + slack
	return n <= wire.MaxAssignBytes
}

// jsonLen is how many bytes s takes at most as a JSON string, its quotes
// left out: escaped as encoding/json escapes (HTML characters included;
// \b and \f counted as \u0008, an invalid byte as the \ufffd it becomes),
// so at most 6 bytes for each byte of s.
func jsonLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '"' || b == '\\' || b == '\n' || b == '\r' || b == '\t':
				n += 2
			case b < 0x20 || b == '<' || b == '>' || b == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1, c == '\u2028', c == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
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
	retry := store.Retry{NodeID: l.nodeID, Reason: l.reason, LostMs: lost}
	if l.resume {
		retry.ResumedBytes = int64(r.text.Len())
		r.served = append(r.served, l.nodeID)
		r.d.metrics.resumed.Inc()
	}
	r.retries = append(r.retries, retry)
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
