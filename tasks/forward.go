package tasks

import (
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// entryState tracks an assign that is being handed to a node's socket.
type entryState uint8

const (
	stateSending  entryState = iota // Assign has not seen Send return yet
	stateSent                       // queued on the node's socket: the node has the task
	stateDetached                   // the session closed while Assign was sending
	// stateHeld: the task was cancelled, but its node did not declare
	// task_cancel (GemmaNet's SDK cannot parse it), so it was told nothing
	// and runs the task to its end. The entry stays, and with it the
	// node's slot (invariant 7), until the node answers (the
	// answer is discarded), its connection ends, or holdUntil passes.
	stateHeld
)

// fwdEntry is the owner side of one task: which connection may answer it,
// and where the answer goes.
type fwdEntry struct {
	taskID   string
	nodeID   string
	replyTo  string
	account  string // the requesting account: the node's quarantine counts it; usage reports name it
	keyID    string // the requesting key, named in the node's usage report
	taskType string // named in the node's usage report
	sess     *nodes.Session
	gen      uint64
	stream   bool
	deadline time.Time
	sentAt   time.Time // when the assign was admitted: node time for a node that reports none
	bytes    int64     // chunk bytes so far (each delta plus ChunkOverhead), against the result cap
	seq      uint32    // chunks forwarded so far
	state    entryState
	// holdUntil (stateHeld) is when the slot is freed if the node never
	// answers: the task's timeout, counted again from each chunk the node
	// still streams (a stream's timeout runs between chunks), and never
	// past the deadline.
	holdUntil time.Time
	// What the node handled, the bound of the usage it may report
	// (usage.go): sent is its task_assign's content and params, in bytes;
	// maxTokens the request's max_tokens (noMaxTokens: none); streamed its
	// chunks' deltas together, a held task's included (the node streamed
	// them, and an unseen report is charged all the same).
	sent, maxTokens, streamed int64
}

// stopped is a task the owner ended on its node; held says it went to
// stateHeld (its slot stays taken) rather than out of the table.
type stopped struct {
	e    *fwdEntry
	held bool
}

// forwardTable maps task id → entry for the tasks this instance's nodes
// hold. An entry leaves it exactly once (take), and whoever takes it owns
// the task's last word to the requester (invariant 3).
type forwardTable struct {
	mu        sync.Mutex
	hold      time.Duration // how long a held task may go unanswered (the task timeout); 0: nothing is held
	tasks     map[string]*fwdEntry
	bySession map[*nodes.Session]map[string]*fwdEntry
	held      int // entries in stateHeld
}

func newForwardTable(hold time.Duration) *forwardTable {
	return &forwardTable{
		hold:      hold,
		tasks:     make(map[string]*fwdEntry),
		bySession: make(map[*nodes.Session]map[string]*fwdEntry),
	}
}

// len is the number of live tasks: those a requester still waits for.
func (t *forwardTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.tasks) - t.held
}

// holding is the number of cancelled tasks whose slots are held (stateHeld).
func (t *forwardTable) holding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held
}

// add inserts e unless its task id is already here.
func (t *forwardTable) add(e *fwdEntry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.tasks[e.taskID]; dup {
		return false
	}
	t.tasks[e.taskID] = e
	m := t.bySession[e.sess]
	if m == nil {
		m = make(map[string]*fwdEntry)
		t.bySession[e.sess] = m
	}
	m[e.taskID] = e
	return true
}

func (t *forwardTable) deleteLocked(e *fwdEntry) {
	if e.state == stateHeld && t.tasks[e.taskID] == e {
		t.held--
	}
	delete(t.tasks, e.taskID)
	if m := t.bySession[e.sess]; m != nil {
		delete(m, e.taskID)
		if len(m) == 0 {
			delete(t.bySession, e.sess)
		}
	}
}

// take removes and returns the entry of taskID if it belongs to sess (any
// session when sess is nil): the node answered it. Otherwise nil: the
// event is not from the assigned connection, or the task is unknown or
// over. An entry still stateSending qualifies: a node that answers has
// the task, even if its assigner has not yet seen Send return. held says
// the task was cancelled and held for this answer, which goes nowhere.
func (t *forwardTable) take(taskID string, sess *nodes.Session) (e *fwdEntry, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e = t.tasks[taskID]
	if e == nil || (sess != nil && e.sess != sess) {
		return nil, false
	}
	held = e.state == stateHeld
	t.deleteLocked(e)
	return e, held
}

// cancel ends the live task taskID of sess (any session when sess is nil),
// which the requester or the owner stopped; nil if there is none (it
// ended, or is held already: a second cancel changes nothing). See stop
// for what becomes of the entry.
func (t *forwardTable) cancel(taskID string, sess *nodes.Session, now time.Time, mayHold bool) (e *fwdEntry, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e = t.tasks[taskID]
	if e == nil || e.state == stateHeld || (sess != nil && e.sess != sess) {
		return nil, false
	}
	return e, t.stopLocked(e, now, mayHold)
}

// stopLocked ends a live entry's task. The entry of a node that takes
// task_cancel leaves the table: the node is told, and its slot is free.
// That of a node that does not is held (stateHeld) while the task's
// timeout has not passed, because the node runs on; mayHold false says it
// has (a cancel for a passed deadline), and the entry leaves the table
// too. Only a sent entry is held: one still stateSending (a cancel in the
// moment between Send and sent, which only an overflowing stream can
// bring) leaves, as before.
func (t *forwardTable) stopLocked(e *fwdEntry, now time.Time, mayHold bool) (held bool) {
	if mayHold && t.hold > 0 && e.state == stateSent && !e.sess.Info.TaskCancel {
		if until := t.holdFrom(e, now); until.After(now) {
			e.state, e.holdUntil = stateHeld, until
			t.held++
			return true
		}
	}
	t.deleteLocked(e)
	return false
}

// holdFrom is when a held task's slot is freed if nothing more is heard
// from its node after now.
func (t *forwardTable) holdFrom(e *fwdEntry, now time.Time) time.Time {
	until := now.Add(t.hold)
	if e.deadline.Before(until) {
		until = e.deadline
	}
	return until
}

// sent settles an entry after Send. ok is Send's answer. It returns what the
// assigner must do: nothing (sent, or the requester is answered elsewhere),
// report a refusal (not sent, entry removed), or tell the requester the
// node is gone (sent, but the session closed meanwhile).
func (t *forwardTable) sent(e *fwdEntry, ok bool) (refuse, gone bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case ok && e.state == stateDetached:
		return false, true
	case ok:
		e.state = stateSent
		return false, false
	case e.state == stateDetached:
		return true, false
	default:
		t.deleteLocked(e)
		return true, false
	}
}

// takeSession removes every entry of a closed session and returns the live
// ones the node had, and how many held ones it took (their slots are
// free now, and nobody waits for them). Entries still being sent are
// marked detached for their assigner.
func (t *forwardTable) takeSession(sess *nodes.Session) (live []*fwdEntry, held int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.bySession[sess] {
		delete(t.tasks, e.taskID)
		switch e.state {
		case stateSent:
			live = append(live, e)
		case stateHeld:
			t.held--
			held++
		default:
			e.state = stateDetached
		}
	}
	delete(t.bySession, sess)
	return live, held
}

// chunkResult says what to do with a chunk.
type chunkResult uint8

const (
	chunkDrop     chunkResult = iota // not from the assigned connection, or unknown task
	chunkForward                     // forward it with the returned seq
	chunkTooLarge                    // over the cap: the entry was stopped (see stopLocked); fail the task
	chunkHeld                        // for a held task: its node runs on; discard it
)

// chunk accounts one chunk with a delta of n bytes from sess against the
// cap. Each chunk costs ChunkOverhead more than its delta, so empty deltas
// cannot stream for ever: at most limit/ChunkOverhead chunks per task
// (invariant 13).
func (t *forwardTable) chunk(taskID string, sess *nodes.Session, n int, limit int64) (fwdEntry, chunkResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.tasks[taskID]
	if e == nil || e.sess != sess {
		return fwdEntry{}, chunkDrop
	}
	e.streamed += int64(n)
	if e.state == stateHeld {
		// The node still streams the task it was never told was
		// cancelled: it is running, so its slot stays taken a while more.
		if until := t.holdFrom(e, time.Now()); until.After(e.holdUntil) {
			e.holdUntil = until
		}
		return fwdEntry{}, chunkHeld
	}
	e.bytes += int64(n) + ChunkOverhead
	if e.bytes > limit {
		t.stopLocked(e, time.Now(), true)
		return *e, chunkTooLarge
	}
	e.seq++
	return *e, chunkForward
}

// expired removes and returns the live entries whose deadline is before
// t0 (to be cancelled), and the held ones whose hold ran out by t0 (their
// slots to be freed: the node did not answer within the task's timeout).
func (t *forwardTable) expired(t0 time.Time) (live, unheld []*fwdEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.tasks {
		switch {
		case e.state == stateSent && e.deadline.Before(t0):
			t.deleteLocked(e)
			live = append(live, e)
		case e.state == stateHeld && e.holdUntil.Before(t0):
			t.deleteLocked(e)
			unheld = append(unheld, e)
		}
	}
	return live, unheld
}

// requesters returns the remote requester instances of the live tasks
// here (a held task's requester has its answer already).
func (t *forwardTable) requesters(self string) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]bool{}
	for _, e := range t.tasks {
		if e.replyTo != self && e.state != stateHeld {
			out[e.replyTo] = true
		}
	}
	return out
}

// takeRequester stops the live tasks whose requester is gone (see
// stopLocked) and returns them.
func (t *forwardTable) takeRequester(replyTo string, now time.Time) []stopped {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []stopped
	for _, e := range t.tasks {
		if e.replyTo == replyTo && e.state == stateSent {
			out = append(out, stopped{e: e, held: t.stopLocked(e, now, true)})
		}
	}
	return out
}

// handled is what e's node handled, its answer being r (usage.go): the
// client of a stream got its deltas, or its result when the node streamed
// none; that of a plain task its result (its chunks go nowhere).
func (e *fwdEntry) handled(r wire.TaskResultPayload) handled {
	returned := int64(len(r.Result))
	if e.stream && (e.seq > 0 || e.streamed > 0) {
		returned = e.streamed
	}
	return handled{sent: e.sent, returned: returned, maxTokens: e.maxTokens}
}
