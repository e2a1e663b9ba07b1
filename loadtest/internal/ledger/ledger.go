package ledger

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-dev/switchyard/loadtest/internal/stats"
)

// Outcomes of a request. Every request sent ends with exactly one.
const (
	OutcomeOK      = "ok"      // a result with status completed
	OutcomeFailed  = "failed"  // a result with status failed (the handler failed)
	OutcomeError   = "error"   // an explicit error: an HTTP error, a stream error event or a dropped connection
	OutcomeLost    = "lost"    // nothing by its deadline plus the grace period
	OutcomeAborted = "aborted" // the load test itself was interrupted
)

// Request kinds and phases.
const (
	KindPlain  = "plain"
	KindStream = "stream"

	PhaseRamp   = "ramp"
	PhaseSteady = "steady"
)

// CodeTransport is the code of a request whose connection failed or was
// cut before an answer (the instance it was sent to died).
const CodeTransport = "transport"

// Record is one request as the load test saw it, from both ends: the
// client's outcome and what the node that ran it reported. Times are
// milliseconds since the start of the configuration's run.
type Record struct {
	ID         int64   `json:"id"`
	Kind       string  `json:"kind"`
	Phase      string  `json:"phase"`
	Via        int     `json:"via"` // index of the instance the request was sent to
	SentMs     float64 `json:"sent_ms"`
	DoneMs     float64 `json:"done_ms"` // outcome time; for lost, the moment it was declared lost
	Outcome    string  `json:"outcome"`
	Status     int     `json:"status,omitempty"` // HTTP status (200 for an error event inside a stream)
	Code       string  `json:"code,omitempty"`
	Message    string  `json:"message,omitempty"`
	LatencyMs  float64 `json:"latency_ms"`
	ProcMs     int64   `json:"proc_ms"`     // processing_time_ms the node reported (ok and failed only)
	OverheadMs float64 `json:"overhead_ms"` // latency − proc_ms (ok and failed only)
	NodeID     string  `json:"node_id,omitempty"`
	// Node and NodeInst are the simulated node that started the task and
	// the instance it was connected to then; -1 when no node started it.
	Node     int     `json:"node"`
	NodeInst int     `json:"node_inst"`
	StartMs  float64 `json:"handler_start_ms,omitempty"`
	EndMs    float64 `json:"handler_end_ms,omitempty"` // 0 while the handler runs (or never ran)
	Runs     int     `json:"runs,omitempty"`           // handler starts; more than the attempts is a duplicate execution
	// Earlier are the instances of the nodes that started the task before
	// the last one (Node, NodeInst): a task run again after its node failed.
	Earlier []int `json:"earlier_node_insts,omitempty"`
	// Attempts is how many nodes the coordinator says it handed the task
	// (its answer's "attempts"; 1 when it says nothing): more than 1 when
	// a node failed it and it ran again on another.
	Attempts int    `json:"attempts,omitempty"`
	Chunks   int    `json:"chunks,omitempty"` // stream chunks received
	Class    string `json:"class,omitempty"`  // relation to the fault (report.Classify)

	done bool
}

// Ledger holds every request of one configuration's run. It is the one
// place outcomes are written, so that "exactly one outcome per request"
// is checked rather than assumed.
type Ledger struct {
	t0 time.Time

	mu      sync.Mutex
	recs    []*Record
	doubles []string // a second outcome for a request: must stay empty
	running map[int64]*Record
	counts  map[string]int
}

// New starts a ledger whose times count from t0.
func New(t0 time.Time) *Ledger {
	return &Ledger{t0: t0, running: map[int64]*Record{}, counts: map[string]int{}}
}

// Ms is t as milliseconds since t0, the unit of a record's times.
func (l *Ledger) Ms(t time.Time) float64 { return float64(t.Sub(l.t0).Microseconds()) / 1000 }

// Open records a request about to be sent and returns it.
func (l *Ledger) Open(kind, phase string, via int, sent time.Time) *Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &Record{ID: int64(len(l.recs)), Kind: kind, Phase: phase, Via: via, SentMs: l.Ms(sent), Node: -1, NodeInst: -1}
	l.recs = append(l.recs, r)
	l.counts["in_flight"]++
	return r
}

// Answer is what came back for a request.
type Answer struct {
	Outcome string
	Status  int
	Code    string
	Message string
	ProcMs  int64
	NodeID  string
	Chunks  int
	// Attempts is the answer's "attempts" (0 when it has none: one).
	Attempts int
}

// Close gives r its outcome at time at. A second Close of the same record
// is not applied; it is kept as a double and fails the accounting check.
func (l *Ledger) Close(r *Record, at time.Time, a Answer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.done {
		l.doubles = append(l.doubles, fmt.Sprintf("request %d: %s after %s", r.ID, a.Outcome, r.Outcome))
		return
	}
	r.done = true
	r.DoneMs = l.Ms(at)
	r.LatencyMs = stats.Round3(r.DoneMs - r.SentMs)
	r.Outcome, r.Status, r.Code, r.ProcMs, r.NodeID, r.Chunks = a.Outcome, a.Status, a.Code, a.ProcMs, a.NodeID, a.Chunks
	r.Attempts = max(a.Attempts, 1)
	if len(a.Message) > 200 {
		a.Message = a.Message[:200] + "…"
	}
	r.Message = a.Message
	if a.Outcome == OutcomeOK || a.Outcome == OutcomeFailed {
		r.OverheadMs = stats.Round3(r.LatencyMs - float64(a.ProcMs))
	}
	l.counts["in_flight"]--
	l.counts[a.Outcome]++
	if a.Outcome != OutcomeOK {
		l.counts["not_ok"]++
	}
}

// HandlerStart is called by a simulated node when it starts the task of
// request id; inst is the instance the node is connected to. It returns
// false for an id that is not one of this run's requests.
func (l *Ledger) HandlerStart(id int64, node, inst int, at time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id < 0 || id >= int64(len(l.recs)) {
		return false
	}
	r := l.recs[id]
	if r.Runs > 0 {
		r.Earlier = append(r.Earlier, r.NodeInst)
	}
	r.Runs++
	r.Node, r.NodeInst, r.StartMs, r.EndMs = node, inst, l.Ms(at), 0
	l.running[id] = r
	return true
}

// HandlerEnd is called when the handler of request id returns.
func (l *Ledger) HandlerEnd(id int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.running[id]; ok {
		r.EndMs = l.Ms(at)
		delete(l.running, id)
	}
}

// RunningOn counts the tasks that nodes connected to instance inst are
// running for requests sent to another instance: the tasks whose fate a
// kill of inst puts to the test.
func (l *Ledger) RunningOn(inst int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.running {
		if r.NodeInst == inst && r.Via != inst && !r.done {
			n++
		}
	}
	return n
}

// Counts is a snapshot for the progress line.
type Counts struct {
	Sent, InFlight, OK, NotOK, Lost int
}

// Counts returns the current totals.
func (l *Ledger) Counts() Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Counts{Sent: len(l.recs), InFlight: l.counts["in_flight"], OK: l.counts[OutcomeOK],
		NotOK: l.counts["not_ok"], Lost: l.counts[OutcomeLost]}
}

// Records returns the records; call it only once every request has ended.
func (l *Ledger) Records() []*Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Record(nil), l.recs...)
}

// Accounting is the check that every request sent has exactly one outcome.
type Accounting struct {
	Sent      int            `json:"sent"`
	Outcomes  map[string]int `json:"outcomes"`
	NoOutcome []int64        `json:"no_outcome,omitempty"` // ids still without an outcome: must be empty
	Doubles   []string       `json:"doubles,omitempty"`    // second outcomes: must be empty
	// Duplicates are requests whose task more nodes started (or one node
	// more times) than the coordinator says it handed it: at-most-once
	// execution per attempt was broken. A task run again after its node
	// failed it (Record.Attempts) is not one.
	Duplicates []int64 `json:"duplicates,omitempty"`
	// Retried counts the requests whose task ran again on another node
	// after its node failed it (Record.Attempts > 1), whatever their end.
	Retried int `json:"retried"`
}

// OK reports whether every request has exactly one outcome.
func (a Accounting) OK() bool {
	total := 0
	for _, n := range a.Outcomes {
		total += n
	}
	return len(a.NoOutcome) == 0 && len(a.Doubles) == 0 && total == a.Sent
}

// Account counts the outcomes of recs.
func Account(recs []*Record, doubles []string) Accounting {
	a := Accounting{Sent: len(recs), Outcomes: map[string]int{}, Doubles: doubles}
	for _, r := range recs {
		if r.Outcome == "" {
			a.NoOutcome = append(a.NoOutcome, r.ID)
		} else {
			a.Outcomes[r.Outcome]++
		}
		if r.Runs > max(r.Attempts, 1) {
			a.Duplicates = append(a.Duplicates, r.ID)
		}
		if r.Attempts > 1 {
			a.Retried++
		}
	}
	return a
}

// Accounting checks the ledger.
func (l *Ledger) Accounting() Accounting {
	l.mu.Lock()
	doubles := append([]string(nil), l.doubles...)
	l.mu.Unlock()
	return Account(l.Records(), doubles)
}

// Content is what request id sends: its node reads the id back
// (ParseContent) to tell the ledger which request it runs.
func Content(id int64) string { return "request " + strconv.FormatInt(id, 10) }

// ParseContent is the id of the request whose content is s, if it is one.
func ParseContent(s string) (int64, bool) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "request "), 10, 64)
	return id, err == nil
}
