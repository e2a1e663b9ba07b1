package nodes

import (
	"fmt"
	"sync"
	"time"
)

// Automatic quarantine: a node whose tasks keep failing is
// taken out of service on its own, so requests stop going to it, and serves again
// after a cool-off or when an operator resumes it. It counts the tasks that
// ended on the node in a row as failed — the node answered "failed", sent
// an invalid task_result or stayed silent past the task's deadline — and
// quarantines it once QuarantineAfter of them failed for at least two
// accounts: one account's poisonous inputs cannot take a node away from
// everyone else. A task that completes ends the run; a cancelled task or a
// disconnect counts neither way.

// StateQuarantined is a node quarantined by the coordinator: it takes no new
// task, like a paused one, until the cool-off passes or it is resumed.
const StateQuarantined = "quarantined"

// quarantineAccounts is how many accounts a run of failures must span.
const quarantineAccounts = 2

// failRun is a node's current run of failed tasks.
type failRun struct {
	mu       sync.Mutex
	n        int
	accounts []string // distinct, at most quarantineAccounts
	last     string   // why the last one failed
	timer    *time.Timer
}

// TaskEnded tells the node's session how a task on it ended, from the
// owner's side: failed (why says how) or completed. It is cheap, takes no
// lock but the session's own, and never blocks.
func (s *Session) TaskEnded(accountID string, failed bool, why string) {
	after := s.hub.cfg.QuarantineAfter
	if after <= 0 {
		return
	}
	r := &s.fails
	r.mu.Lock()
	if !failed {
		r.n, r.accounts, r.last = 0, r.accounts[:0], ""
		r.mu.Unlock()
		return
	}
	r.n++
	r.last = why
	if accountID != "" && !contains(r.accounts, accountID) && len(r.accounts) < quarantineAccounts {
		r.accounts = append(r.accounts, accountID)
	}
	if r.n < after || len(r.accounts) < quarantineAccounts || !s.serving() {
		r.mu.Unlock()
		return
	}
	n, last := r.n, r.last
	r.n, r.accounts, r.last = 0, r.accounts[:0], ""
	st := &nodeState{StateQuarantined, fmt.Sprintf("quarantined: %d tasks in a row failed (last: %s); serves again at %s unless resumed sooner",
		n, last, time.Now().Add(s.hub.cfg.QuarantineCoolOff).UTC().Format(time.RFC3339))}
	if !s.state.CompareAndSwap(nil, st) {
		r.mu.Unlock() // an operator changed its state meanwhile: theirs stands
		return
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timer = time.AfterFunc(s.hub.cfg.QuarantineCoolOff, func() { s.hub.endQuarantine(s, st) })
	r.mu.Unlock()
	s.hub.metrics.quarantined.Inc()
	s.log.Warn("node quarantined", "node_id", s.NodeID, "failed_in_a_row", n, "last_failure", last,
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
	s.fails.mu.Lock()
	defer s.fails.mu.Unlock()
	if s.fails.timer != nil {
		s.fails.timer.Stop()
	}
}
