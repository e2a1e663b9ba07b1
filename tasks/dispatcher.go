package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/store"
)

// Request is a task as a client asked for it, already validated.
type Request struct {
	TaskID    string
	AccountID string
	KeyID     string // the API key that asked (usage is metered under it)
	// Session, when set, names a conversation: the request goes to the
	// node that served the session last while it has a free slot
	// (nodes.Affinity; the server makes it from the account and the
	// client's session id).
	Session  string
	TaskType string
	Content  string
	Params   json.RawMessage // a JSON object; nil means {}
	Stream   bool
	Trust    string // "official" restricts routing to official nodes
	// Labels restricts routing to nodes that declared every one of them
	// (nodes.Pick.Labels); nil for any node.
	Labels map[string]string
	Avoid  []string // nodes to use only if no other can take the task (a split task's siblings)
	// Priority orders the requests waiting for a slot, 0–9, higher first
	// (nodes.Waiters); within one, the accounts waiting take turns. The
	// HTTP side sets it: a zero Request waits at priority 0.
	Priority int
	// Retries is how many times the task may be run again on another node
	// after its node failed it (retry.go): 0 takes Config.TaskRetries,
	// negative allows none, and at most MaxTaskRetries are used.
	Retries int
	// LocalOnly restricts routing to this instance's own nodes (an async
	// task: its lease holder and its node live and die together, so a
	// killed instance loses both and nothing else runs the task twice).
	// The cluster is not asked again before no_node.
	LocalOnly bool

	subtask bool // a part of a split task, or a copy of a hedged one: recorded with its parent, not on its own
	// exclude are nodes never to try (a hedge's: the first copy's node);
	// noQueue: fail at once when every node is busy (a hedge waits for no
	// slot).
	exclude []string
	noQueue bool
}

// Outcome is a task that reached its node and came back with a result. A
// handler failure is an Outcome with Status StatusFailed, not an error.
type Outcome struct {
	TaskID       string
	NodeID       string
	Status       Status // StatusCompleted or StatusFailed
	Result       string
	ProcessingMs int64
	Usage        *store.Usage
	Streamed     bool // at least one chunk reached the client
	// Attempts is how many nodes were handed the task; Retries, why each
	// before the last was not its answer (retry.go).
	Attempts int
	Retries  []store.Retry
	// Hedge says which copy of a hedged task answered (HedgeFirst,
	// HedgeSecond; hedge.go): "" when no second copy went out.
	Hedge string
}

// Hooks let the HTTP side follow a task as it runs. Both are optional.
type Hooks struct {
	// Assigned is called once, when the task is first handed to a node; a
	// streaming response starts then.
	Assigned func()
	// Chunk receives each streamed delta in order. An error (the client is
	// gone) cancels the task.
	Chunk func(delta string) error
}

// dispatcher is the requester side: it runs a task from node selection to
// outcome, retrying on another node while the task has not been handed
// over, and records every task it finishes exactly once.
type dispatcher struct {
	cfg       Config
	dir       Directory
	standings Standings
	health    Health
	owner     *owner // this instance's owner side: the fast path
	bus       Bus    // the way to every other owner
	tracker   *Tracker
	rec       Recorder
	metrics   *Metrics
	log       *slog.Logger
	affinity  nodes.Affinity
	served    *served // tasks finished per task type over the last minute
	stats     *stats  // the operator's figures over the last five minutes
	// keptText is the bytes of streams' text kept for a node that would
	// continue them (run.keep), bounded by StreamBufferBytes.
	keptText atomic.Int64
}

// run is Run with two more hooks for RunSplit: onNode hears which node got
// the task, and inspect sees the finished run.
func (d *dispatcher) run(ctx context.Context, req Request, h Hooks, onNode func(string), inspect func(*run)) (Outcome, error) {
	start := time.Now()
	p := d.tracker.add(&req, start)
	defer d.tracker.remove(p)
	r := run{d: d, p: p, req: &req, hooks: h, start: start, onNode: onNode}
	out, err := r.dispatch(ctx)
	d.keptText.Add(-int64(r.text.Len()))
	out.Attempts, out.Retries = r.attempts, r.retries
	d.finish(&r, out, err)
	if inspect != nil {
		inspect(&r)
	}
	return out, err
}

// run is the state of one Run.
type run struct {
	d        *dispatcher
	p        *pending
	req      *Request
	hooks    Hooks
	start    time.Time
	assigned time.Time // of the attempt that got the node
	owner    string
	nodeID   string
	attempts int
	lastSeq  uint32
	streamed bool
	onNode   func(nodeID string)
	sawGone  bool   // an owner refused because its instance is gone or draining
	looked   bool   // the directory was asked to look again (lookAgain)
	had      string // the node the request's session had ("" for none): what its metric is judged by
	prefer   string // the node to prefer: had, until that node refuses
	// lost is why the attempt await just ended failed for its node's sake
	// ("" when it did not: retry.go).
	lost        string
	lostAttempt *lostAttempt  // the attempt being run again, until another node has the task
	retries     []store.Retry // the attempts run again elsewhere
	// A stream's text as its client got it, for a node that continues it
	// (retry.go): kept while it fits the result cap and the instance's
	// budget (keptText); textCapped once it did not.
	text       strings.Builder
	textCapped bool
	resumers   bool     // a candidate of the stream's picks declared resume: its text is worth keeping
	resuming   bool     // the next attempt continues the stream: only a resume node may take it
	resumed    string   // what the current attempt continues ("" for none)
	served     []string // nodes whose text the client has, before the current attempt's
}

// lookAgain asks the directory, once per request, to re-read the cluster
// before the request is refused for want of a node: a node registered
// elsewhere a moment ago may not be in this instance's view yet
// (invariant 11). It reports whether to pick again.
func (r *run) lookAgain(ctx context.Context) bool {
	if r.looked || r.req.LocalOnly {
		return false
	}
	r.looked = true
	return r.d.dir.Refresh(ctx) == nil
}

func (r *run) dispatch(ctx context.Context) (Outcome, error) {
	d := r.d
	tried := slices.Clone(r.req.exclude)
	cp := candPool.Get().(*[]nodes.Candidate)
	cands, used := (*cp)[:0], 0
	defer func() {
		// The sessions they point to may go. Only what this request wrote
		// is cleared: the rest was cleared by the request before.
		clear(cands[:used])
		*cp = cands[:0]
		candPool.Put(cp)
	}()
	var queueDeadline time.Time
	// This request's place in the queue for a slot, once it had to wait.
	var w *nodes.Waiter
	defer func() {
		if w != nil {
			w.Done(false) // gave up, or failed: a wake it holds goes on
		}
	}()
	r.had = r.lastNode(ctx)
	r.prefer = r.had
	// Attempts lost to their nodes (retry.go) do not count against
	// MaxAttempts: those are the nodes tried before "no node".
	for r.attempts < d.cfg.MaxAttempts+len(r.retries)+btoi(r.lostAttempt != nil) {
		var c nodes.Candidate
		var ok, busy bool
		cands, c, ok, busy = r.pick(cands, tried)
		used = max(used, len(cands))
		if busy && w == nil {
			// Queue, then look again if first (nodes.Waiter.First), so a
			// slot freed in between is not missed: with others queued, its
			// wake went to the first of them, and a look from further back
			// could take the slot ahead of them (it did, in
			// TestWaitingRequestsServedInOrder on a busy machine). Only a
			// request that must wait queues.
			w = d.dir.WaitSlot(r.req.TaskType, nodes.Place{Account: r.req.AccountID, Priority: r.req.Priority,
				Trust: r.req.Trust, Labels: r.req.Labels, LocalOnly: r.req.LocalOnly})
			if w.First() {
				cands, c, ok, busy = r.pick(cands, tried)
				used = max(used, len(cands))
			}
		}
		if busy && r.req.noQueue {
			return Outcome{}, &Error{Code: CodeBusy, Message: "every other node that can run this task type is busy"}
		}
		if busy {
			if queueDeadline.IsZero() {
				queueDeadline = r.queueUntil()
			}
			if err := r.waitForSlot(ctx, w, queueDeadline); err != nil {
				return r.failed(err)
			}
			continue
		}
		if !ok {
			if r.lookAgain(ctx) {
				continue
			}
			break
		}
		tried = append(tried, c.NodeID)
		r.attempts++
		r.p.retarget(c.Owner, c.NodeID, c.Gen, r.attempts)
		resume := ""
		if r.resuming {
			resume = r.text.String()
		}
		release, err := d.send(ctx, c, r.req, r.p, c.NodeID == r.prefer, resume)
		if isRefused(err) {
			// A waiter keeps its place: another request took the slot
			// between this one's pick and its claim.
			if err := r.refused(c, err, &tried, &queueDeadline); err != nil {
				return r.failed(err)
			}
			continue
		}
		if err != nil {
			return r.failed(err)
		}
		r.retried()
		r.lastSeq, r.resumed, r.resuming = 0, resume, false
		if w != nil {
			// The slot is this request's (or, on another instance, its
			// assign is on the way there): the next waiter is first now.
			w.Done(true)
			w = nil
		}
		r.assigned, r.owner, r.nodeID = time.Now(), c.Owner, c.NodeID
		r.rememberNode(ctx, c.NodeID)
		r.p.markAssigned(r.assigned)
		if r.onNode != nil {
			r.onNode(c.NodeID)
		}
		if r.hooks.Assigned != nil {
			r.hooks.Assigned()
			r.hooks.Assigned = nil
		}
		out, err := r.await(ctx)
		release()
		if isRefused(err) {
			r.owner, r.nodeID = "", ""
			if err := r.refused(c, err, &tried, &queueDeadline); err != nil {
				return r.failed(err)
			}
			continue
		}
		if r.lose(c.NodeID, out, err) {
			// The next attempt queues afresh, within the task's deadline.
			queueDeadline = time.Time{}
			continue
		}
		return out, err
	}
	if l := r.lostAttempt; l != nil {
		// No other node can take it: the request ends as the attempt did.
		return l.out, l.err
	}
	if !d.health.Healthy() {
		return Outcome{}, &Error{Code: CodeUnavailable,
			Message: "no node on this instance can run this task type, and the rest of the cluster is unreachable (Redis is down)"}
	}
	if r.sawGone || d.dir.Hidden(r.req.TaskType) {
		// The nodes exist, on an instance that is gone or out of reach for
		// now; they reconnect elsewhere within seconds.
		return Outcome{}, &Error{Code: CodeUnavailable,
			Message: "the instance holding the nodes for this task type is unreachable; retry shortly"}
	}
	msg := "no node available for this task type"
	if r.req.Trust == nodes.TrustOfficial {
		msg = "no official node available for this task type"
	}
	if len(r.req.Labels) > 0 {
		msg += " with the labels " + formatLabels(r.req.Labels)
	}
	return Outcome{}, &Error{Code: CodeNoNode, Message: msg}
}

// candPool holds the candidate lists of picks: every capable node is a
// candidate, and with 3,000 of them a request allocated 288 KB for the
// list; the collector then took 29 % of a loaded instance's CPU
// (BENCHMARKS.md, "the fleet profile").
var candPool = sync.Pool{New: func() any { return new([]nodes.Candidate) }}

// refused takes in an owner's refusal of the attempt on c, so the next
// pick is better informed:
//
//   - the node had no free slot (another request took it first): not the
//     node's fault and not an attempt. The directory learns the node is full
//     (a remote view can be a second old), so the next pick goes to another
//     node at once; only when every node is full does the request wait, and
//     never past its queue timeout.
//   - the owner instance is gone or draining: none of its nodes can take
//     the task, so the directory stops offering them (and this request does
//     not spend its attempts on them one by one).
func (r *run) refused(c nodes.Candidate, err error, tried *[]string, queueDeadline *time.Time) error {
	d := r.d
	if c.NodeID == r.prefer {
		// The session's node refused: the normal rule from here on (a
		// preferred node is tried even when the view says full, so trying
		// it again would loop until the queue's deadline).
		r.prefer = ""
	}
	switch refusalOf(err) {
	case refusedFull:
		*tried, r.attempts = (*tried)[:len(*tried)-1], r.attempts-1
		d.dir.MarkFull(c.NodeID)
		if queueDeadline.IsZero() {
			*queueDeadline = r.queueUntil()
		}
		if time.Now().After(*queueDeadline) {
			return &Error{Code: CodeBusy, Message: "every node that can run this task type is busy; retry later"}
		}
	case refusedGone:
		r.sawGone = true
		d.ownerGone(c.Owner)
	}
	return nil
}

// ownerGone tells the directory that an instance cannot take tasks.
func (d *dispatcher) ownerGone(instance string) {
	if instance != d.cfg.Instance {
		d.dir.MarkGone(instance)
	}
}

// affinityWait bounds the affinity's read on a request's path, and its
// write (made while the node works): a Redis slower than that costs a
// session its node, not its answer's time. Generous, because a miss moves
// the session (and its cache) for good; a healthy Redis answers in well
// under a millisecond.
const affinityWait = 500 * time.Millisecond

// lastNode is the node that served the request's session last ("" when it
// has none, or the affinity cannot say in time).
func (r *run) lastNode(ctx context.Context) string {
	if r.req.Session == "" {
		return ""
	}
	actx, cancel := context.WithTimeout(ctx, affinityWait)
	defer cancel()
	node, err := r.d.affinity.Last(actx, r.req.Session)
	if err != nil {
		r.d.metrics.affinity.WithLabelValues("error").Inc()
		return ""
	}
	return node
}

// rememberNode records the node a session's request went to, counting
// whether it was the one the session had (hit), another (miss: that one
// was busy or gone) or the session's first (new). An unchanged node is not
// written again: Last renewed it.
func (r *run) rememberNode(ctx context.Context, nodeID string) {
	if r.req.Session == "" {
		return
	}
	switch r.had {
	case nodeID:
		r.d.metrics.affinity.WithLabelValues("hit").Inc()
		return
	case "":
		r.d.metrics.affinity.WithLabelValues("new").Inc()
	default:
		r.d.metrics.affinity.WithLabelValues("miss").Inc()
	}
	actx, cancel := context.WithTimeout(ctx, affinityWait)
	defer cancel()
	if err := r.d.affinity.Remember(actx, r.req.Session, nodeID); err != nil {
		r.d.metrics.affinity.WithLabelValues("error").Inc()
	}
	r.had, r.prefer = nodeID, nodeID
}

// pick chooses a node for the next attempt: one not tried yet, preferring
// one not in Avoid. busy means every node that qualifies is full.
func (r *run) pick(cands []nodes.Candidate, tried []string) (_ []nodes.Candidate, c nodes.Candidate, ok, busy bool) {
	d := r.d
	cands = d.dir.Candidates(cands[:0], r.req.TaskType)
	if r.req.LocalOnly {
		cands = localOnly(cands, d.cfg.Instance)
	}
	if r.resuming {
		cands = resumable(cands)
	}
	if r.req.Stream && !r.resumers {
		r.resumers = slices.ContainsFunc(cands, func(c nodes.Candidate) bool { return c.Resume })
	}
	pick := nodes.Pick{Capability: r.req.TaskType, Trust: r.req.Trust, Labels: r.req.Labels, Exclude: tried, Prefer: r.prefer, Local: d.cfg.Instance}
	// Every candidate's standing is judged at one reading of the clock
	// (Select does not keep the closure: it stays on the stack).
	now := time.Now()
	standing := func(nodeID string) nodes.Standing { return d.standings.Standing(nodeID, now) }
	if len(r.req.Avoid) > 0 {
		soft := pick
		soft.Exclude = append(append([]string(nil), tried...), r.req.Avoid...)
		if c, ok, _ = nodes.Select(cands, soft, standing); ok {
			return cands, c, true, false
		}
	}
	c, ok, busy = nodes.Select(cands, pick, standing)
	return cands, c, ok, busy
}

// resumable keeps the candidates that declared "resume", in place, as
// localOnly does.
func resumable(cands []nodes.Candidate) []nodes.Candidate {
	kept := cands[:0]
	for _, c := range cands {
		if c.Resume {
			kept = append(kept, c)
		}
	}
	clear(cands[len(kept):])
	return kept
}

// localOnly keeps the candidates this instance holds, in place. What it
// drops is cleared, so the pooled list keeps no session alive.
func localOnly(cands []nodes.Candidate, instance string) []nodes.Candidate {
	kept := cands[:0]
	for _, c := range cands {
		if c.Owner == instance {
			kept = append(kept, c)
		}
	}
	clear(cands[len(kept):])
	return kept
}

// slotRecheck is how often the first waiter of a queue looks again for a
// slot nobody signalled (another instance's task on a remote node ended,
// and the node's owner has not written it since).
const slotRecheck = 25 * time.Millisecond

// waitForSlot waits in the queue until a slot may have freed: a wake from
// the directory, or, for the first waiter, a short recheck. Only the first
// keeps a short timer: with thousands waiting, a 25 ms timer each was 40,000
// wakeups a second per thousand requests. A recheck that finds the waiter
// no longer first (a waiter of a higher priority, or of an account whose
// turn it is, came in ahead) waits on without looking: only the first may
// take a slot nobody signalled, or the queue's order would not hold.
func (r *run) waitForSlot(ctx context.Context, w *nodes.Waiter, deadline time.Time) error {
	first := w.Again()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return &Error{Code: CodeBusy, Message: "every node that can run this task type is busy; retry later"}
		}
		if first {
			left = min(left, slotRecheck)
		}
		t := time.NewTimer(left)
		select {
		case <-w.C:
			t.Stop()
			return nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return &Error{Code: CodeCanceled, Message: "the client went away"}
		}
		if first = w.Again(); first {
			return nil
		}
	}
}

// send hands the assign to the node's owner: directly when it is this
// instance, else over the bus. A refusal is a *refusal. A remote node's
// slot is taken in the directory's view before the assign goes
// (nodes.ClusterDirectory.Reserve), and release gives it back when the
// attempt ends.
func (d *dispatcher) send(ctx context.Context, c nodes.Candidate, req *Request, p *pending, preferred bool, resume string) (release func(), err error) {
	e := &bus.Envelope{
		Kind: bus.KindAssign, From: d.cfg.Instance, ReplyTo: d.cfg.Instance,
		TaskID: req.TaskID, NodeID: c.NodeID, Gen: c.Gen,
		TaskType: req.TaskType, Content: req.Content, Params: req.Params, Stream: req.Stream,
		Deadline: p.created.Add(d.deadline(req)).UnixMilli(), Account: req.AccountID, KeyID: req.KeyID,
		ResumeText: resume,
	}
	if c.Owner == d.cfg.Instance {
		return noRelease, d.owner.assignDirect(ctx, e)
	}
	release, ok := d.dir.Reserve(c.NodeID)
	switch {
	case !ok && preferred:
		// A session's node: this instance's view of its slots lags its
		// owner's, which decides (nodes.Pick.Prefer).
		release = noRelease
	case !ok:
		// Another request here took its last slot since the pick.
		return noRelease, &refusal{refusedFull, "the node has no free slot"}
	}
	d.metrics.hop(e.Kind)
	n, err := d.bus.Publish(ctx, c.Owner, e)
	switch {
	case err != nil:
		release()
		// The bus error names Redis's address and the instance id: logged,
		// never shown to a client. Counted (the bus's publish errors, the
		// tasks' unavailable outcomes); at warn, a Redis outage would write
		// a line per request.
		d.log.Debug("cannot publish an assign", "task_id", req.TaskID, "owner", c.Owner, "err", err)
		return noRelease, &Error{Code: CodeUnavailable, Message: "cannot reach the instance that holds the node (Redis is unreachable); retry shortly"}
	case n == 0:
		release()
		return noRelease, &refusal{refusedGone, "the node's instance is gone"}
	}
	return release, nil
}

func noRelease() {}

// deadline is the longest the owner keeps a task.
func (d *dispatcher) deadline(req *Request) time.Duration {
	if req.Stream {
		return d.cfg.StreamMax
	}
	return d.cfg.TaskTimeout
}

// await waits for the current attempt's outcome.
func (r *run) await(ctx context.Context) (Outcome, error) {
	d := r.d
	wait := d.cfg.TaskTimeout
	if len(r.retries) > 0 {
		// A retry has what is left of the task's time.
		wait = max(min(wait, time.Until(r.deadline())), 0)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	hardStop := r.p.created.Add(d.cfg.StreamMax)
	var batch []queued
	for {
		select {
		case <-r.p.signal:
		case <-timer.C:
			r.cancel(ctx, reasonDeadline)
			return Outcome{}, &Error{Code: CodeTimeout, Message: "the task timed out"}
		case <-ctx.Done():
			reason := "client gone"
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, errHedgeLost):
				reason = "hedge lost" // the other copy of a hedged task answered first
			case r.req.subtask && cause != ctx.Err():
				reason = "split part failed" // runSplit's errgroup ended the siblings
			}
			r.cancel(ctx, reason)
			return Outcome{}, &Error{Code: CodeCanceled, Message: "the client went away"}
		}
		batch = r.p.take(batch)
		for _, e := range batch {
			switch e.Kind {
			case bus.KindChunk:
				if e.Seq != r.lastSeq+1 {
					r.cancel(ctx, "stream broken")
					return Outcome{}, &Error{Code: CodeNodeDisconnected, Message: fmt.Sprintf("the stream lost chunks (got %d after %d)", e.Seq, r.lastSeq)}
				}
				r.lastSeq = e.Seq
				if r.hooks.Chunk != nil {
					if err := r.hooks.Chunk(e.Delta); err != nil {
						r.cancel(ctx, "client gone")
						return Outcome{}, &Error{Code: CodeCanceled, Message: "the client went away"}
					}
				}
				r.streamed = true
				r.keep(e.Delta)
				// A stream may outlive TaskTimeout while it keeps producing.
				timer.Reset(min(d.cfg.TaskTimeout, time.Until(hardStop)))
			case bus.KindResult:
				return r.result(e.Result)
			case bus.KindNodeGone:
				r.lost = RetryNodeDisconnected
				msg := "the node disconnected before returning a result"
				if e.Reason == reasonOwnerGone {
					r.lost, msg = RetryInstanceGone, "the instance holding the node stopped answering before it returned a result"
				}
				return Outcome{}, &Error{Code: CodeNodeDisconnected, Message: msg}
			}
		}
	}
}

func (r *run) result(res *bus.Result) (Outcome, error) {
	if res.Code != "" {
		if rf := asRefusal(res.Code, res.Message); rf != nil {
			return Outcome{}, rf
		}
		return Outcome{}, &Error{Code: Code(res.Code), Message: res.Message}
	}
	if res.Status == statusRejected {
		return Outcome{}, &Error{Code: CodeRejected, Message: "the node could not read the task: " + res.Text}
	}
	if r.req.Stream && res.Chunks != r.lastSeq {
		return Outcome{}, &Error{Code: CodeNodeDisconnected, Message: fmt.Sprintf("the stream lost chunks (%d sent, %d arrived)", res.Chunks, r.lastSeq)}
	}
	out := Outcome{
		TaskID: r.req.TaskID, NodeID: r.nodeID, Status: StatusFailed, Result: r.resumed + res.Text,
		ProcessingMs: res.ProcessingMs, Streamed: r.streamed,
	}
	switch res.Status {
	case string(StatusCompleted):
		out.Status = StatusCompleted
	case statusUnavailable:
		r.lost = RetryNodeUnavailable
	}
	if out.ProcessingMs < 0 {
		out.ProcessingMs = time.Since(r.assigned).Milliseconds()
	}
	if res.HasUsage {
		out.Usage = &store.Usage{PromptTokens: res.PromptTokens, CompletionTokens: res.OutputTokens}
	}
	return out, nil
}

// cancel tells the owner to stop the current attempt (invariant
// 6). ctx is the request's.
func (r *run) cancel(ctx context.Context, reason string) {
	owner, nodeID, gen := r.p.target()
	if owner == "" {
		return
	}
	e := &bus.Envelope{Kind: bus.KindCancel, From: r.d.cfg.Instance, ReplyTo: r.d.cfg.Instance,
		TaskID: r.req.TaskID, NodeID: nodeID, Gen: gen, Reason: reason}
	if owner == r.d.cfg.Instance {
		r.d.owner.cancel(e)
		return
	}
	r.d.metrics.hop(e.Kind)
	// The client's context may be what ended; the cancel must still go out.
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer stop()
	if _, err := r.d.bus.Publish(ctx, owner, e); err != nil {
		r.d.log.Debug("cannot send cancel; the owner's sweep will stop the task at its deadline", "task_id", r.req.TaskID, "err", err)
	}
}

// finish records the task once (a split task's part: only the node's part
// in its reputation), and logs a failure worth an operator's look.
func (d *dispatcher) finish(r *run, out Outcome, err error) {
	now := time.Now()
	var nodeOutcome *store.Outcome
	if err == nil {
		if !r.req.subtask {
			d.served.add(r.req.TaskType, now)
		}
		nodeOutcome = &store.Outcome{NodeID: r.nodeID, Account: r.req.AccountID, Success: out.Status == StatusCompleted,
			ElapsedMs: now.Sub(r.assigned).Milliseconds(), At: now}
		if !r.req.Stream && out.ProcessingMs >= 0 {
			d.metrics.overhead.Observe(max(now.Sub(r.start).Seconds()-float64(out.ProcessingMs)/1000, 0))
		}
	} else {
		e := AsError(err)
		switch e.Code {
		case CodeTimeout:
			// GemmaNet counts a timeout as a failure of the full timeout.
			nodeOutcome = &store.Outcome{NodeID: r.nodeID, Account: r.req.AccountID, ElapsedMs: d.cfg.TaskTimeout.Milliseconds(), At: now}
		case CodeNodeDisconnected, CodeResultTooLarge:
			nodeOutcome = &store.Outcome{NodeID: r.nodeID, Account: r.req.AccountID, ElapsedMs: now.Sub(r.assigned).Milliseconds(), At: now}
		}
		if e.Code != CodeCanceled && e.Code != CodeNoNode {
			// Counted by code (switchyard_tasks_total); at info a failing
			// node would write a line per request.
			d.log.Debug("task failed", "task_id", r.req.TaskID, "node_id", r.nodeID, "code", e.Code, "message", e.Message)
		}
	}
	// A split task's parts count in their nodes' reputation, but the task is
	// one request: RunSplit records and counts it once.
	if !r.req.subtask {
		rec := d.newRecord(r.req, r.start)
		rec.Owner, rec.Attempts, rec.Retries = r.owner, r.attempts, r.retries
		if !r.assigned.IsZero() {
			rec.AssignedAt = r.assigned.UTC()
		}
		if r.nodeID != "" {
			// Every node whose text the client got: a rating applies to each.
			rec.NodeIDs = append(r.served, r.nodeID)
		}
		d.record(&rec, r.start, now, out, err)
	}
	if nodeOutcome != nil && nodeOutcome.NodeID != "" {
		d.rec.RecordOutcome(*nodeOutcome)
	}
}

// formatLabels writes labels as key=value pairs, by key, for messages.
func formatLabels(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + labels[k])
	}
	return b.String()
}

// queueUntil is how long from now a request may wait for a slot: the queue
// timeout, never past the task's deadline (a retry's is near).
func (r *run) queueUntil() time.Time {
	if t, end := time.Now().Add(r.d.cfg.QueueTimeout), r.deadline(); t.Before(end) {
		return t
	}
	return r.deadline()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
