package tasks

import (
	"sync"
	"time"

	"switchyard/bus"
)

// Tracker holds the requester side of every task in flight here: what
// each waits for and from whom. deliver never blocks, so the bus's receive
// loop is never held up by a slow client.
type Tracker struct {
	mu    sync.RWMutex
	tasks map[string]*pending
}

// newTracker returns an empty tracker.
func newTracker() *Tracker {
	return &Tracker{tasks: make(map[string]*pending)}
}

// pending is one task waiting for its outcome.
type pending struct {
	id        string
	accountID string
	taskType  string
	stream    bool
	created   time.Time

	mu       sync.Mutex
	owner    string // instance holding the node's socket for the current attempt
	nodeID   string
	gen      uint64
	attempt  int
	assigned time.Time
	queue    []*bus.Envelope
	signal   chan struct{} // cap 1: the queue has something
}

// add starts tracking a task. The caller removes it when done.
func (t *Tracker) add(req *Request, now time.Time) *pending {
	p := &pending{
		id: req.TaskID, accountID: req.AccountID, taskType: req.TaskType, stream: req.Stream,
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
}

// Len is the number of tasks waiting here.
func (t *Tracker) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.tasks)
}

// deliver hands an owner's envelope (chunk, result, node_gone) to the task
// waiting for it. It reports false, and the envelope is dropped, when no
// task here waits for it from that owner, node and connection (DESIGN §5,
// invariant 2, on the requester side).
func (t *Tracker) deliver(e *bus.Envelope) bool {
	t.mu.RLock()
	p := t.tasks[e.TaskID]
	t.mu.RUnlock()
	if p == nil {
		return false
	}
	p.mu.Lock()
	if p.owner != e.From || p.nodeID != e.NodeID || p.gen != e.Gen {
		p.mu.Unlock()
		return false
	}
	p.queue = append(p.queue, e)
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
	return true
}

// retarget points the task at a new attempt and forgets anything still
// queued from an earlier one.
func (p *pending) retarget(owner, nodeID string, gen uint64, attempt int) {
	p.mu.Lock()
	p.owner, p.nodeID, p.gen, p.attempt = owner, nodeID, gen, attempt
	p.queue = p.queue[:0]
	p.mu.Unlock()
}

func (p *pending) markAssigned(now time.Time) {
	p.mu.Lock()
	p.assigned = now
	p.mu.Unlock()
}

// take returns what has been delivered since the last call.
func (p *pending) take(buf []*bus.Envelope) []*bus.Envelope {
	p.mu.Lock()
	buf = append(buf[:0], p.queue...)
	clear(p.queue)
	p.queue = p.queue[:0]
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
		TaskID: p.id, AccountID: p.accountID, TaskType: p.taskType, Stream: p.stream,
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
