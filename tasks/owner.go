package tasks

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
)

// Sessions finds this instance's session of a node (the nodes.Hub).
type Sessions interface {
	Session(nodeID string) *nodes.Session
}

// owner is the owner side of the tasks whose nodes are connected here.
type owner struct {
	instance  string
	resultMax int64
	sessions  Sessions
	bus       Bus
	local     func(*bus.Envelope) bool // this instance's requester side (Tracker.deliver)
	rec       Recorder                 // takes the nodes' usage reports
	out       *outbound
	fwd       *forwardTable
	metrics   *Metrics
	log       *slog.Logger
	draining  atomic.Bool
	// run is the context of the engine's Run (nil before it): it bounds
	// the node readers' publishes, so none goes out once the engine stops.
	run atomic.Pointer[context.Context]
}

func newOwner(cfg Config, b Bus, local func(*bus.Envelope) bool, out *outbound, rec Recorder, m *Metrics) *owner {
	return &owner{
		instance: cfg.Instance, resultMax: cfg.ResultMaxBytes,
		bus: b, local: local, rec: rec, out: out, fwd: newForwardTable(cfg.TaskTimeout), metrics: m, log: cfg.Logger,
	}
}

// assign admits a task for one of this instance's nodes, or refuses it
// (with a *refusal) when the node is not connected here at that generation
// or has no free slot (invariant 7). Once it returns nil, the
// requester hears from this owner exactly once more: a result or
// node_gone. It never blocks: the bus's receive loop calls it, and the
// node's session writer sends the assign.
func (o *owner) assign(e *bus.Envelope) error { return o.admit(e, (*nodes.Session).Send) }

// assignDirect is assign for the request's own goroutine (the dispatcher's
// local path): the node's session may write the assign in it when its
// socket is free (nodes.Session.SendDirect; ctx, the request's, ending
// does not cut that write).
func (o *owner) assignDirect(ctx context.Context, e *bus.Envelope) error {
	return o.admit(e, func(s *nodes.Session, msg []byte) bool { return s.SendDirect(ctx, msg) })
}

// admit is assign, the assign message sent with send.
func (o *owner) admit(e *bus.Envelope, send func(*nodes.Session, []byte) bool) error {
	if o.draining.Load() {
		o.metrics.refusals.WithLabelValues("draining").Inc()
		return &refusal{refusedGone, "the instance holding the node is draining"}
	}
	if e.ReplyTo != o.instance && o.run.Load() == nil {
		// Before the engine's Run, the node's answer could not be
		// published (reply): the requester would wait for its deadline.
		// It tries another node instead. The refusal goes out once Run
		// starts the outbound queue.
		o.metrics.refusals.WithLabelValues("not_running").Inc()
		return &refusal{refusedNotHere, "the instance holding the node is not running yet"}
	}
	s := o.sessions.Session(e.NodeID)
	if s == nil || (e.Gen != 0 && s.Gen != e.Gen) {
		o.metrics.refusals.WithLabelValues("not_connected").Inc()
		return &refusal{refusedNotHere, "the node is not connected to this instance"}
	}
	if e.ResumeText != "" && (!s.Info.Resume || !e.Stream) {
		// Only a node that declared "resume" can continue a stream; any
		// other would start it over, and its client would read it twice.
		o.metrics.refusals.WithLabelValues("no_resume").Inc()
		return &refusal{refusedNotHere, "the node cannot continue a stream"}
	}
	if !s.TryAcquire() {
		o.metrics.refusals.WithLabelValues("no_free_slot").Inc()
		return &refusal{refusedFull, "the node has no free slot"}
	}
	params := e.Params
	if len(params) == 0 {
		params = []byte("{}")
	}
	ent := &fwdEntry{
		taskID: e.TaskID, nodeID: e.NodeID, replyTo: e.ReplyTo, account: e.Account, keyID: e.KeyID, taskType: e.TaskType,
		sess: s, gen: s.Gen, stream: e.Stream, deadline: time.UnixMilli(e.Deadline), sentAt: time.Now(),
		sent: int64(len(e.Content) + len(params) + len(e.ResumeText)), maxTokens: maxTokensOf(params),
	}
	if !o.fwd.add(ent) {
		s.Release()
		o.metrics.refusals.WithLabelValues("duplicate").Inc()
		return &refusal{refusedNotHere, "the task is already assigned here"}
	}
	msg := nodes.Wire.MustEncode(wire.MsgTaskAssign, wire.TaskAssignPayload{
		TaskID: e.TaskID, TaskType: e.TaskType, Content: e.Content, Params: params, Stream: e.Stream,
		ResumeText: e.ResumeText,
	})
	if len(msg) > wire.MaxAssignBytes {
		// Only a resumed stream's can be (the text so far, escaped): no
		// node may be sent more than the SDKs read (docs/PROTOCOL.md).
		o.fwd.sent(ent, false) // as a send that failed
		s.Release()
		o.metrics.refusals.WithLabelValues("too_large").Inc()
		return &refusal{refusedNotHere, "the task_assign would be larger than a node reads"}
	}
	refuse, gone := o.fwd.sent(ent, send(s, msg))
	switch {
	case refuse:
		s.Release()
		o.metrics.refusals.WithLabelValues("send_failed").Inc()
		return &refusal{refusedNotHere, "the node's connection is closing"}
	case gone:
		s.Release()
		o.post(ent, &bus.Envelope{Kind: bus.KindNodeGone, Reason: "node disconnected"})
	}
	return nil
}

// reasonDeadline is the cancel reason of a task whose timeout passed.
const reasonDeadline = "deadline passed"

// cancel stops a task at the requester's word (invariant 6).
func (o *owner) cancel(e *bus.Envelope) {
	// Once the task's timeout has passed, its slot is not held for an
	// answer any longer, even on a node that cannot be told to stop.
	ent, held := o.fwd.cancel(e.TaskID, nil, time.Now(), e.Reason != reasonDeadline)
	if ent == nil {
		return
	}
	if e.Reason == reasonDeadline {
		ent.sess.TaskEnded(ent.account, true, "no answer within the task timeout")
	}
	o.cancelOnNode(ent, held, e.Reason)
}

// cancelOnNode stops a task on its node. A node that declared task_cancel
// is told, and its slot is free at once (invariant 6). Any other node
// (GemmaNet's SDK, which cannot parse task_cancel) is sent nothing and runs
// the task to its end, so its slot stays taken while the entry is held
// (held): freed when the node answers, when its connection ends, or when
// the task's timeout passes (invariant 7). A cancel after the timeout
// frees the slot at once: that is how long a slot waits for an answer.
func (o *owner) cancelOnNode(ent *fwdEntry, held bool, reason string) {
	if !held {
		ent.sess.Release()
	}
	if ent.sess.Info.TaskCancel {
		ent.sess.Send(wire.MustEncode(wire.MsgTaskCancel, wire.TaskCancelPayload{TaskID: ent.taskID, Reason: reason}))
	}
	o.metrics.cancels.WithLabelValues(reason).Inc()
}

func (o *owner) chunk(s *nodes.Session, c wire.TaskChunkPayload) {
	ent, res := o.fwd.chunk(c.TaskID, s, len(c.Delta), o.resultMax)
	switch res {
	case chunkDrop:
		o.metrics.dropped.WithLabelValues("chunk").Inc()
	case chunkHeld:
		// A cancelled task's node streams on, not knowing: not a fault.
	case chunkTooLarge:
		o.cancelOnNode(&ent, ent.state == stateHeld, string(CodeResultTooLarge))
		o.reply(&ent, &bus.Envelope{Kind: bus.KindResult, Result: &bus.Result{
			Code: string(CodeResultTooLarge), Message: o.tooLarge(),
		}})
	case chunkForward:
		if !ent.stream {
			return // a plain task waits for the result; its chunks go nowhere
		}
		if o.reply(&ent, &bus.Envelope{Kind: bus.KindChunk, Seq: ent.seq, Delta: c.Delta}) <= 0 {
			// Invariant 5: the requester is gone (or out of reach: a lost
			// chunk breaks its stream anyway), so nobody will read the rest.
			if gone, held := o.fwd.cancel(c.TaskID, s, time.Now(), true); gone != nil {
				o.cancelOnNode(gone, held, "requester gone")
			}
		}
	}
}

func (o *owner) result(s *nodes.Session, r wire.TaskResultPayload) {
	ent, held := o.fwd.take(r.TaskID, s)
	if ent == nil {
		o.metrics.dropped.WithLabelValues("result").Inc()
		return
	}
	s.Release()
	usage, hasUsage := o.charge(ent, s, r)
	if held {
		// The answer to a task cancelled on a node that was not told: the
		// node has done what it was asked, and nobody waits for it.
		o.report(ent, r, usage, true)
		o.metrics.holdEnds.WithLabelValues("answered").Inc()
		return
	}
	// A node that answered "unavailable" failed the task as surely as one
	// that answered "failed" (retry.go).
	why := "the node answered failed"
	if r.Status == statusUnavailable {
		why = "the node answered unavailable"
	}
	s.TaskEnded(ent.account, r.Status == wire.StatusFailed || r.Status == statusUnavailable, why)
	res := &bus.Result{Status: string(r.Status), Text: r.Result, ProcessingMs: r.ProcessingTimeMs, Chunks: ent.seq}
	if hasUsage {
		res.HasUsage, res.PromptTokens, res.OutputTokens = true, usage.PromptTokens, usage.CompletionTokens
	}
	tooLarge := int64(len(r.Result)) > o.resultMax
	if tooLarge {
		res = &bus.Result{Code: string(CodeResultTooLarge), Message: o.tooLarge()}
	}
	delivered := o.reply(ent, &bus.Envelope{Kind: bus.KindResult, Result: res})
	// The requester counts the tokens it is told of: not those of an
	// answer it never got (-1: the bus failed, maybe after delivering)
	// nor of one too large to pass on.
	o.report(ent, r, usage, delivered == 0 || tooLarge)
}

// charge is the usage the node reported in r for ent's task, held to what
// it handled (usage.go): the one place a node's tokens are judged, before
// the requester is told them (and believes them) and before the owner's
// usage report, so the client's answer, its key's quotas and the usage
// history agree. What is cut off is counted, and the report is held for or
// against the node's standing. ok is false when the node reported none.
func (o *owner) charge(ent *fwdEntry, s *nodes.Session, r wire.TaskResultPayload) (u store.Usage, ok bool) {
	if r.Usage == nil {
		return store.Usage{}, false
	}
	c := clampUsage(*r.Usage, ent.handled(r))
	if c.promptCut > 0 {
		o.metrics.usageClamped.WithLabelValues("prompt", "bytes").Inc()
	}
	if c.completionCut > 0 {
		bound := "bytes"
		if c.byMax {
			bound = "max_tokens"
		}
		o.metrics.usageClamped.WithLabelValues("completion", bound).Inc()
	}
	s.UsageReported(ent.account, c.implausible != "", c.implausible)
	return c.usage, true
}

// report hands what the node reported for ent's task to the recorder:
// here, where the node's answer arrives, it is counted whether or not the
// requester is still there to record the task (its client left, its
// instance died), and once per task and node (the entry is taken once). A
// node that answers a task cancelled on it without being told (held) did
// the work too. An answer the owner cannot read (badResult), or that
// comes after its entry left (a task_cancel node told to stop, a task past
// its timeout), reports nothing. usage is the node's tokens as charged
// (charge). unseen: no requester was told the answer's usage
// (Recorder.RecordUsage).
func (o *owner) report(ent *fwdEntry, r wire.TaskResultPayload, usage store.Usage, unseen bool) {
	now := time.Now()
	rep := store.UsageReport{TaskID: ent.taskID, NodeID: ent.nodeID, AccountID: ent.account, KeyID: ent.keyID,
		TaskType: ent.taskType, At: now, NodeMs: r.ProcessingTimeMs, ResultBytes: int64(len(r.Result)),
		PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens}
	if rep.NodeMs < 0 { // the node reported no time: as the requester's record counts it
		rep.NodeMs = now.Sub(ent.sentAt).Milliseconds()
	}
	o.rec.RecordUsage(rep, unseen)
}

func (o *owner) badResult(s *nodes.Session, taskID string, err error) {
	ent, held := o.fwd.take(taskID, s)
	if ent == nil {
		return
	}
	s.Release()
	if held {
		o.metrics.holdEnds.WithLabelValues("answered").Inc()
		return
	}
	s.TaskEnded(ent.account, true, "an invalid task_result")
	o.reply(ent, &bus.Envelope{Kind: bus.KindResult, Result: &bus.Result{
		Status: string(StatusFailed), Text: "the node sent an invalid task_result: " + err.Error(), Chunks: ent.seq,
		ProcessingMs: -1,
	}})
}

func (o *owner) closed(s *nodes.Session) {
	live, held := o.fwd.takeSession(s)
	for range held {
		s.Release()
		o.metrics.holdEnds.WithLabelValues("disconnected").Inc()
	}
	for _, ent := range live {
		s.Release()
		o.reply(ent, &bus.Envelope{Kind: bus.KindNodeGone, Reason: "node disconnected"})
	}
}

// address fills in who the envelope is from and which task it is about.
func (o *owner) address(ent *fwdEntry, e *bus.Envelope) {
	e.From, e.TaskID, e.NodeID, e.Gen = o.instance, ent.taskID, ent.nodeID, ent.gen
}

// reply sends an envelope about ent's task to its requester and returns how
// many received it (-1: unknown, the bus failed). It publishes in the
// caller's goroutine (a node session's reader or writer), because a chunk
// needs the answer (invariant 5) and a node's chunks must stay in order.
func (o *owner) reply(ent *fwdEntry, e *bus.Envelope) int {
	o.address(ent, e)
	if ent.replyTo == o.instance {
		if o.local(e) {
			return 1
		}
		return 0
	}
	run := o.run.Load()
	if run == nil {
		// The engine is not running: nothing goes out (as once it stops).
		o.log.Debug("the engine is not running; not publishing", "task_id", ent.taskID, "to", ent.replyTo)
		return -1
	}
	o.metrics.hop(e.Kind)
	// On the node's reader: bounded like the outbound queue's publishes
	// (invariant 14), not only by the Redis client's own timeouts.
	pctx, cancel := context.WithTimeout(*run, publishTimeout)
	n, err := o.bus.Publish(pctx, ent.replyTo, e)
	cancel()
	if err != nil {
		// Counted by the bus (publish errors); a line per message at warn
		// would flood while Redis is away.
		o.log.Debug("cannot reach the requester instance", "task_id", ent.taskID, "to", ent.replyTo, "err", err)
		return -1
	}
	return n
}

// post is reply for the bus's receive loop: a remote requester's envelope
// goes through the outbound queue, so the loop never waits on Redis.
func (o *owner) post(ent *fwdEntry, e *bus.Envelope) {
	o.address(ent, e)
	if ent.replyTo == o.instance {
		o.local(e)
		return
	}
	o.out.post(ent.replyTo, e)
}

func (o *owner) tooLarge() string {
	return fmt.Sprintf("the node's result is larger than %d bytes (each chunk counts %d bytes more than its delta)", o.resultMax, ChunkOverhead)
}

// handleEnvelope acts on an assign or cancel from the bus. It never blocks.
func (o *owner) handleEnvelope(e *bus.Envelope) {
	switch e.Kind {
	case bus.KindAssign:
		if err := o.assign(e); err != nil {
			r := err.(*refusal)
			o.post(&fwdEntry{taskID: e.TaskID, nodeID: e.NodeID, gen: e.Gen, replyTo: e.ReplyTo},
				&bus.Envelope{Kind: bus.KindResult, Result: &bus.Result{Code: string(r.kind), Message: r.msg}})
		}
	case bus.KindCancel:
		o.cancel(e)
	}
}

// sweep cancels tasks past their deadline whose requester never said so
// (it died, or its cancel was lost), and frees the slots of held tasks
// whose node stayed silent past the task's timeout, so no entry outlives
// its task.
func (o *owner) sweep(now time.Time) {
	live, unheld := o.fwd.expired(now)
	for _, ent := range live {
		ent.sess.TaskEnded(ent.account, true, "no answer within the task timeout")
		o.cancelOnNode(ent, false, reasonDeadline)
	}
	for _, ent := range unheld {
		ent.sess.Release()
		o.metrics.holdEnds.WithLabelValues("expired").Inc()
	}
}

// requesterGone cancels every task of a requester instance that is gone
// (invariant 5). Each task's failure is still posted to the
// requester: if it was taken for gone wrongly (Redis lost its alive key
// and it kept its subscription), its clients hear at once rather than at
// the task timeout; if it is gone, the publish reaches nobody.
func (o *owner) requesterGone(instance string) int {
	ents := o.fwd.takeRequester(instance, time.Now())
	for _, st := range ents {
		o.cancelOnNode(st.e, st.held, "requester gone")
		o.post(st.e, &bus.Envelope{Kind: bus.KindResult, Result: &bus.Result{
			Code:    string(CodeUnavailable),
			Message: "the instance holding the node took this instance for gone and cancelled the task; retry",
		}})
	}
	return len(ents)
}
