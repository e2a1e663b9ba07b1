package tasks

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
)

// ChunkOverhead is what one chunk costs beyond its delta's bytes, against
// the result cap (Config.ResultMaxBytes) on the owner side and against the
// stream queues on the requester side (invariant 13: an empty
// message still costs something). It bounds the chunks of one task too:
// at most ResultMaxBytes / ChunkOverhead (16,384 at the default 1 MiB). It
// is part of the protocol: docs/PROTOCOL.md states it.
const ChunkOverhead = 64

// Tracker holds the requester side of every task in flight here: what
// each waits for and from whom. deliver never blocks, so the bus's receive
// loop (or a node's reader, on the fast path) is never held up by a slow
// client. What it queues is bounded (invariant 13): per task by
// StreamQueueBytes (and so in entries, each costing at least
// ChunkOverhead), per instance by StreamBufferBytes; a chunk that would go
// over either fails its one task with CodeStreamOverflow.
type Tracker struct {
	mu    sync.RWMutex
	tasks map[string]*pending

	taskMax    int64 // bytes queued per task
	taskMaxN   int   // entries queued per task: taskMax / ChunkOverhead
	instMax    int64 // bytes queued over all tasks
	queued     atomic.Int64
	onOverflow func(p *pending, owner, nodeID string, gen uint64) // cancels the task on its node; never blocks
}

// trackerLimits are the tracker's bounds (Config.StreamQueueBytes and
// Config.StreamBufferBytes) and what to do when a task goes over them.
type trackerLimits struct {
	taskBytes, instanceBytes int64
	// overflow is called, without locks held, when a task went over a
	// bound: it must tell the node to stop (invariant 6) without blocking.
	overflow func(p *pending, owner, nodeID string, gen uint64)
}

// newTracker returns an empty tracker with the default bounds and no
// overflow hook (tests).
func newTracker() *Tracker {
	d := Config{}.withDefaults()
	return newTrackerWith(trackerLimits{taskBytes: d.StreamQueueBytes, instanceBytes: d.StreamBufferBytes})
}

func newTrackerWith(l trackerLimits) *Tracker {
	if l.overflow == nil {
		l.overflow = func(*pending, string, string, uint64) {}
	}
	return &Tracker{tasks: make(map[string]*pending), taskMax: l.taskBytes,
		taskMaxN: int(max(l.taskBytes/ChunkOverhead, 1)), instMax: l.instanceBytes, onOverflow: l.overflow}
}

// queued is one envelope waiting for its task's reader. A chunk keeps only
// its sequence number and delta (48 bytes and the delta, less than
// ChunkOverhead beyond the delta), so what a queue is charged bounds what
// it holds.
type queued struct {
	Result *bus.Result // KindResult
	Delta  string      // KindChunk
	Reason string      // KindNodeGone: reasonOwnerGone, or the owner's
	Seq    uint32      // KindChunk
	Kind   bus.Kind
}

// pending is one task waiting for its outcome.
type pending struct {
	t         *Tracker
	id        string
	accountID string
	keyID     string
	taskType  string
	stream    bool
	created   time.Time

	mu         sync.Mutex
	owner      string // instance holding the node's socket for the current attempt
	nodeID     string
	gen        uint64
	attempt    int
	assigned   time.Time
	queue      []queued
	bytes      int64         // what the queued chunks are charged
	overflowed bool          // the task went over a bound: it has failed; nothing more is queued
	signal     chan struct{} // cap 1: the queue has something
}

// add starts tracking a task. The caller removes it when done.
func (t *Tracker) add(req *Request, now time.Time) *pending {
	p := &pending{
		t: t, id: req.TaskID, accountID: req.AccountID, keyID: req.KeyID, taskType: req.TaskType, stream: req.Stream,
		created: now, signal: make(chan struct{}, 1),
	}
	t.mu.Lock()
	t.tasks[p.id] = p
	t.mu.Unlock()
	return p
}

func (t *Tracker) remove(p *pending) {
	t.mu.Lock()
	if t.tasks[p.id] == p {
		delete(t.tasks, p.id)
	}
	t.mu.Unlock()
	p.mu.Lock()
	t.queued.Add(-p.bytes)
	p.bytes, p.queue = 0, nil
	p.mu.Unlock()
}

// Len is the number of tasks waiting here.
func (t *Tracker) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.tasks)
}

// deliver hands an owner's envelope (chunk, result, node_gone) to the task
// waiting for it. It reports false, and the envelope is dropped, when no
// task here waits for it from that owner, node and connection (invariant
// 2, on the requester side), or the task has already failed for
// going over its queue's bound.
//
// Only chunks are charged against the bounds: a result or node_gone comes
// once per attempt, its size is capped by the owner, and it must never be
// lost (it ends the task). A chunk that would take the task's queue over
// StreamQueueBytes (or its entry bound), or every queue here together over
// StreamBufferBytes, fails the task at once with CodeStreamOverflow: the
// queue is emptied, the failure takes its place, and the node is told to
// stop (invariant 13: the one task fails, never the instance).
func (t *Tracker) deliver(e *bus.Envelope) bool {
	t.mu.RLock()
	p := t.tasks[e.TaskID]
	t.mu.RUnlock()
	if p == nil {
		return false
	}
	p.mu.Lock()
	if p.overflowed || p.owner != e.From || p.nodeID != e.NodeID || p.gen != e.Gen {
		p.mu.Unlock()
		return false
	}
	q := queued{Kind: e.Kind, Result: e.Result, Reason: e.Reason}
	if e.Kind == bus.KindChunk {
		q.Seq, q.Delta = e.Seq, e.Delta
		cost := int64(len(e.Delta)) + ChunkOverhead
		// A chunk finding the queue empty always goes in (one chunk may be
		// up to the result cap, larger than the queue's bound); the bounds
		// limit what waits behind it.
		switch {
		case len(p.queue) == 0:
			t.queued.Add(cost)
			p.bytes += cost
		case p.bytes+cost > t.taskMax || len(p.queue) >= t.taskMaxN:
			t.overflowLocked(p, fmt.Sprintf("the client read the stream more slowly than the node wrote it: more than %d bytes (or %d chunks) were waiting for it", t.taskMax, t.taskMaxN))
		case t.queued.Add(cost) > t.instMax:
			t.queued.Add(-cost)
			t.overflowLocked(p, "this instance holds as many unread stream chunks as it may; the slowest-read streams fail first")
		default:
			p.bytes += cost
		}
		if p.overflowed {
			owner, nodeID, gen := p.owner, p.nodeID, p.gen
			p.mu.Unlock()
			t.onOverflow(p, owner, nodeID, gen)
			p.wake()
			return true
		}
	}
	p.queue = append(p.queue, q)
	p.mu.Unlock()
	p.wake()
	return true
}

// overflowLocked fails p: what it queued is dropped and uncharged, and the
// failure is all its reader will find.
func (t *Tracker) overflowLocked(p *pending, msg string) {
	p.overflowed = true
	t.queued.Add(-p.bytes)
	p.bytes = 0
	clear(p.queue)
	p.queue = append(p.queue[:0], queued{Kind: bus.KindResult, Result: &bus.Result{Code: string(CodeStreamOverflow), Message: msg}})
}

func (p *pending) wake() {
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// retarget points the task at a new attempt and forgets anything still
// queued from an earlier one.
func (p *pending) retarget(owner, nodeID string, gen uint64, attempt int) {
	t := p.t
	p.mu.Lock()
	p.owner, p.nodeID, p.gen, p.attempt = owner, nodeID, gen, attempt
	if !p.overflowed { // a failed task keeps its failure for its reader
		t.queued.Add(-p.bytes)
		p.bytes = 0
		clear(p.queue)
		p.queue = p.queue[:0]
	}
	p.mu.Unlock()
}

func (p *pending) markAssigned(now time.Time) {
	p.mu.Lock()
	p.assigned = now
	p.mu.Unlock()
}

// take returns what has been delivered since the last call, and uncharges
// it: once taken, a chunk is the reader's (it is written to the client
// before the next take).
func (p *pending) take(buf []queued) []queued {
	t := p.t
	p.mu.Lock()
	buf = append(buf[:0], p.queue...)
	clear(p.queue)
	p.queue = p.queue[:0]
	t.queued.Add(-p.bytes)
	p.bytes = 0
	p.mu.Unlock()
	return buf
}

// target returns the current attempt's owner and node.
func (p *pending) target() (owner, nodeID string, gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owner, p.nodeID, p.gen
}

// current returns the current attempt's owner and node, and when it was
// handed over (zero: not yet).
func (p *pending) current() (owner, nodeID string, gen uint64, assigned time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owner, p.nodeID, p.gen, p.assigned
}

// InFlight describes a task still waiting here, for GET /api/v1/tasks/{id}.
type InFlight struct {
	TaskID     string
	AccountID  string
	KeyID      string // the API key that asked for it
	TaskType   string
	Stream     bool
	NodeID     string
	Owner      string
	Attempt    int
	CreatedAt  time.Time
	AssignedAt time.Time
}

// Lookup returns a task in flight here.
func (t *Tracker) Lookup(id string) (InFlight, bool) {
	t.mu.RLock()
	p := t.tasks[id]
	t.mu.RUnlock()
	if p == nil {
		return InFlight{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return InFlight{
		TaskID: p.id, AccountID: p.accountID, KeyID: p.keyID, TaskType: p.taskType, Stream: p.stream,
		NodeID: p.nodeID, Owner: p.owner, Attempt: p.attempt,
		CreatedAt: p.created, AssignedAt: p.assigned,
	}, true
}

// owners returns, for each remote owner instance, the tasks waiting on it.
func (t *Tracker) owners(self string) map[string][]*pending {
	out := map[string][]*pending{}
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, p := range t.tasks {
		p.mu.Lock()
		owner := p.owner
		p.mu.Unlock()
		if owner != "" && owner != self {
			out[owner] = append(out[owner], p)
		}
	}
	return out
}
