package tasks

import (
	"sync"
	"time"

	"switchyard/nodes"
)

// entryState tracks an assign that is being handed to a node's socket.
type entryState uint8

const (
	stateSending  entryState = iota // Assign has not seen Send return yet
	stateSent                       // queued on the node's socket: the node has the task
	stateDetached                   // the session closed while Assign was sending
)

// fwdEntry is the owner side of one task: which connection may answer it,
// and where the answer goes.
type fwdEntry struct {
	taskID   string
	nodeID   string
	replyTo  string
	sess     *nodes.Session
	gen      uint64
	stream   bool
	deadline time.Time
	bytes    int64  // chunk bytes so far (each delta plus ChunkOverhead), against the result cap
	seq      uint32 // chunks forwarded so far
	state    entryState
}

// forwardTable maps task id → entry for the tasks this instance's nodes
// hold. An entry leaves it exactly once (take), and whoever takes it owns
// the task's last word to the requester (DESIGN §5, invariant 3).
type forwardTable struct {
	mu        sync.Mutex
	tasks     map[string]*fwdEntry
	bySession map[*nodes.Session]map[string]*fwdEntry
}

func newForwardTable() *forwardTable {
	return &forwardTable{
		tasks:     make(map[string]*fwdEntry),
		bySession: make(map[*nodes.Session]map[string]*fwdEntry),
	}
}

func (t *forwardTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.tasks)
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
	delete(t.tasks, e.taskID)
	if m := t.bySession[e.sess]; m != nil {
		delete(m, e.taskID)
		if len(m) == 0 {
			delete(t.bySession, e.sess)
		}
	}
}

// take removes and returns the entry of taskID if it belongs to sess (any
// session when sess is nil). Otherwise nil: the event is not from the
// assigned connection, or the task is unknown or over. An entry still
// stateSending qualifies: a node that answers has the task, even if its
// assigner has not yet seen Send return.
func (t *forwardTable) take(taskID string, sess *nodes.Session) *fwdEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.tasks[taskID]
	if e == nil || (sess != nil && e.sess != sess) {
		return nil
	}
	t.deleteLocked(e)
	return e
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

// takeSession removes every entry of a closed session and returns those the
// node had. Entries still being sent are marked detached for their assigner.
func (t *forwardTable) takeSession(sess *nodes.Session) []*fwdEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*fwdEntry
	for _, e := range t.bySession[sess] {
		delete(t.tasks, e.taskID)
		if e.state == stateSent {
			out = append(out, e)
		} else {
			e.state = stateDetached
		}
	}
	delete(t.bySession, sess)
	return out
}

// chunkResult says what to do with a chunk.
type chunkResult uint8

const (
	chunkDrop     chunkResult = iota // not from the assigned connection, or unknown task
	chunkForward                     // forward it with the returned seq
	chunkTooLarge                    // over the cap: the entry was removed; fail the task
)

// chunk accounts one chunk with a delta of n bytes from sess against the
// cap. Each chunk costs ChunkOverhead more than its delta, so empty deltas
// cannot stream for ever: at most limit/ChunkOverhead chunks per task
// (DESIGN §5, invariant 13).
func (t *forwardTable) chunk(taskID string, sess *nodes.Session, n int, limit int64) (fwdEntry, chunkResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.tasks[taskID]
	if e == nil || e.sess != sess {
		return fwdEntry{}, chunkDrop
	}
	e.bytes += int64(n) + ChunkOverhead
	if e.bytes > limit {
		t.deleteLocked(e)
		return *e, chunkTooLarge
	}
	e.seq++
	return *e, chunkForward
}

// expired removes and returns the entries whose deadline is before t0.
func (t *forwardTable) expired(t0 time.Time) []*fwdEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*fwdEntry
	for _, e := range t.tasks {
		if e.state == stateSent && e.deadline.Before(t0) {
			t.deleteLocked(e)
			out = append(out, e)
		}
	}
	return out
}

// requesters returns the remote requester instances of the tasks here.
func (t *forwardTable) requesters(self string) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]bool{}
	for _, e := range t.tasks {
		if e.replyTo != self {
			out[e.replyTo] = true
		}
	}
	return out
}

// takeRequester removes and returns the entries whose requester is gone.
func (t *forwardTable) takeRequester(replyTo string) []*fwdEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*fwdEntry
	for _, e := range t.tasks {
		if e.replyTo == replyTo && e.state == stateSent {
			t.deleteLocked(e)
			out = append(out, e)
		}
	}
	return out
}
