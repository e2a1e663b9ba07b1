package nodes

import (
	"fmt"
	"sync"
	"time"
)

// Automatic quarantine: a node whose tasks keep failing, or whose usage
// reports keep being implausible, is taken out of service on its own, so
// requests stop going to it, and serves again after a cool-off or when an
// operator resumes it.
//
// Two runs are counted, each the same way. The failure run counts the
// tasks that ended on the node in a row as failed — the node answered
// "failed", sent an invalid task_result or stayed silent past the task's
// deadline; a task that completes ends it, a cancelled task or a
// disconnect counts neither way. The usage run counts the usage reports in
// a row that claimed tokens far beyond what the node handled (the owner
// judges that: tasks' usage.go); a plausible report ends it, a task
// without a report counts neither way. Either run quarantines the node once
// QuarantineAfter of its entries came from at least two accounts: one
// account's poisonous inputs, or its crafted requests, cannot take a node
// away from everyone else.

// StateQuarantined is a node quarantined by the coordinator: it takes no new
// task, like a paused one, until the cool-off passes or it is resumed.
const StateQuarantined = "quarantined"

// quarantineAccounts is how many accounts a run must span.
const quarantineAccounts = 2

// badRun is a node's current run of bad task ends of one sort.
type badRun struct {
	n        int
	accounts []string // distinct, at most quarantineAccounts
	last     string   // why the last one was bad
}

// standing is what a node's session counts toward its quarantine.
type standing struct {
	mu    sync.Mutex
	fails badRun // tasks that failed
	usage badRun // usage reports that were implausible
	timer *time.Timer
}

// TaskEnded tells the node's session how a task on it ended, from the
// owner's side: failed (why says how) or completed. It is cheap, takes no
// lock but the session's own, and never blocks.
func (s *Session) TaskEnded(accountID string, failed bool, why string) {
	s.judge(&s.standing.fails, accountID, failed, why, "failures", "tasks in a row failed")
}

// UsageReported tells the node's session how a usage report of a task on
// it was judged, from the owner's side: implausible (why says how) or
// plausible. Only a report whose task named an account should come here.
// It is cheap and never blocks.
func (s *Session) UsageReported(accountID string, implausible bool, why string) {
	s.judge(&s.standing.usage, accountID, implausible, why, "usage", "usage reports in a row were implausible")
}

// judge adds one entry to r, one of the session's runs (standing.mu
// guards it): a bad one lengthens it, a good one ends it. reason labels
// the metric; what says what the run counts, in the quarantine's reason.
func (s *Session) judge(r *badRun, accountID string, bad bool, why, reason, what string) {
	after := s.hub.cfg.QuarantineAfter
	if after <= 0 {
		return
	}
	st := &s.standing
	st.mu.Lock()
	if !bad {
		r.n, r.accounts, r.last = 0, r.accounts[:0], ""
		st.mu.Unlock()
		return
	}
	r.n++
	r.last = why
	if accountID != "" && !contains(r.accounts, accountID) && len(r.accounts) < quarantineAccounts {
		r.accounts = append(r.accounts, accountID)
	}
	if r.n < after || len(r.accounts) < quarantineAccounts || !s.serving() {
		st.mu.Unlock()
		return
	}
	n, last := r.n, r.last
	r.n, r.accounts, r.last = 0, r.accounts[:0], ""
	ns := &nodeState{StateQuarantined, fmt.Sprintf("quarantined: %d %s (last: %s); serves again at %s unless resumed sooner",
		n, what, last, time.Now().Add(s.hub.cfg.QuarantineCoolOff).UTC().Format(time.RFC3339))}
	if !s.state.CompareAndSwap(nil, ns) {
		st.mu.Unlock() // an operator changed its state meanwhile: theirs stands
		return
	}
	if st.timer != nil {
		st.timer.Stop()
	}
	st.timer = time.AfterFunc(s.hub.cfg.QuarantineCoolOff, func() { s.hub.endQuarantine(s, ns) })
	st.mu.Unlock()
	s.hub.metrics.quarantined.WithLabelValues(reason).Inc()
	s.log.Warn("node quarantined", "node_id", s.NodeID, "reason", reason, "in_a_row", n, "last", last,
		"cool_off", s.hub.cfg.QuarantineCoolOff)
	s.hub.cfg.Changes.Mark(s.NodeID)
}

// endQuarantine lets a node quarantined with st serve again, unless its
// state changed since (resumed, paused or drained by hand).
func (h *Hub) endQuarantine(s *Session, st *nodeState) {
	if s.isClosing() || !s.state.CompareAndSwap(st, nil) {
		h.metrics.quarantineEnds.WithLabelValues("overridden").Inc()
		return
	}
	h.metrics.quarantineEnds.WithLabelValues("resumed").Inc()
	h.log.Info("node quarantine ended after its cool-off", "node_id", s.NodeID)
	h.cfg.Changes.Mark(s.NodeID)
	h.localSlotsFreed(s, s.FreeSlots())
}

// stopQuarantine drops a closed session's cool-off timer.
func (s *Session) stopQuarantine() {
	s.standing.mu.Lock()
	defer s.standing.mu.Unlock()
	if s.standing.timer != nil {
		s.standing.timer.Stop()
	}
}
