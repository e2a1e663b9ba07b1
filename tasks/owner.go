package tasks

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"switchyard/bus"
	"switchyard/nodes"
)

// Sessions finds this instance's session of a node (the nodes.Hub).
type Sessions interface {
	Session(nodeID string) *nodes.Session
	CloseReplaced(nodeID string, gen uint64) bool
}

// OwnerConfig configures an Owner. Zero values take the defaults shown.
type OwnerConfig struct {
	Instance       string       // this instance's id (required)
	ResultMaxBytes int64        // default 1 MiB: over all chunks together, and for the final result
	Logger         *slog.Logger // default slog.Default()
}

// Owner is the owner side of the tasks whose nodes are connected here. It
// implements nodes.Events for every session.
type Owner struct {
	cfg      OwnerConfig
	ctx      context.Context // bounds bus publishes; the server's root context
	sessions Sessions
	bus      bus.Bus
	local    func(*bus.Envelope) bool // this instance's requester side (Tracker.Deliver)
	fwd      *forwardTable
	metrics  *Metrics
	log      *slog.Logger
	draining atomic.Bool
}

// SetDraining makes the owner refuse new assigns (the instance is
// draining; requesters retry on another node). Tasks already here finish.
func (o *Owner) SetDraining() { o.draining.Store(true) }

var _ nodes.Events = (*Owner)(nil)

// NewOwner returns an owner. local delivers replies to requests that landed
// on this instance without touching the bus.
func NewOwner(ctx context.Context, cfg OwnerConfig, b bus.Bus, local func(*bus.Envelope) bool, m *Metrics) *Owner {
	if cfg.ResultMaxBytes == 0 {
		cfg.ResultMaxBytes = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Owner{cfg: cfg, ctx: ctx, bus: b, local: local, fwd: newForwardTable(), metrics: m, log: cfg.Logger}
}

// SetSessions wires the hub in (the hub needs the owner first, as its Events).
func (o *Owner) SetSessions(s Sessions) { o.sessions = s }

// Len is the number of tasks this instance's nodes hold now.
func (o *Owner) Len() int { return o.fwd.len() }

// Assign admits a task for one of this instance's nodes, or refuses it
// (with a *Error of code refused) when the node is not connected here at
// that generation or has no free slot (DESIGN §5, invariant 7). Once it
// returns nil, the requester hears from this owner exactly once more: a
// result or node_gone.
func (o *Owner) Assign(e *bus.Envelope) error {
	if o.draining.Load() {
		o.metrics.refusals.WithLabelValues("draining").Inc()
		return &Error{Code: codeGone, Message: "the instance holding the node is draining"}
	}
	s := o.sessions.Session(e.NodeID)
	if s == nil || (e.Gen != 0 && s.Gen != e.Gen) {
		o.metrics.refusals.WithLabelValues("not_connected").Inc()
		return refused("the node is not connected to this instance")
	}
	if !s.TryAcquire() {
		o.metrics.refusals.WithLabelValues("no_free_slot").Inc()
		return &Error{Code: codeFull, Message: "the node has no free slot"}
	}
	ent := &fwdEntry{
		taskID: e.TaskID, nodeID: e.NodeID, replyTo: e.ReplyTo, sess: s, gen: s.Gen,
		stream: e.Stream, deadline: time.UnixMilli(e.Deadline),
	}
	if !o.fwd.add(ent) {
		s.Release()
		o.metrics.refusals.WithLabelValues("duplicate").Inc()
		return refused("the task is already assigned here")
	}
	params := e.Params
	if len(params) == 0 {
		params = []byte("{}")
	}
	ok := s.Send(nodes.Encode(nodes.MsgTaskAssign, nodes.AssignPayload{
		TaskID: e.TaskID, TaskType: e.TaskType, Content: e.Content, Params: params, Stream: e.Stream,
	}))
	refuse, gone := o.fwd.sent(ent, ok)
	switch {
	case refuse:
		s.Release()
		o.metrics.refusals.WithLabelValues("send_failed").Inc()
		return refused("the node's connection is closing")
	case gone:
		s.Release()
		o.reply(ent, &bus.Envelope{Kind: bus.KindNodeGone, Reason: "node disconnected"})
	}
	return nil
}

// Cancel stops a task at the requester's word: the node is told, and its
// slot is free again (DESIGN §5, invariant 6).
func (o *Owner) Cancel(e *bus.Envelope) {
	ent := o.fwd.take(e.TaskID, nil)
	if ent == nil {
		return
	}
	o.cancelOnNode(ent, e.Reason)
}

func (o *Owner) cancelOnNode(ent *fwdEntry, reason string) {
	ent.sess.Release()
	ent.sess.Send(nodes.Encode(nodes.MsgTaskCancel, nodes.CancelPayload{TaskID: ent.taskID, Reason: reason}))
	o.metrics.cancels.WithLabelValues(reason).Inc()
}

// Chunk implements nodes.Events.
func (o *Owner) Chunk(s *nodes.Session, c nodes.ChunkPayload) {
	ent, res := o.fwd.chunk(c.TaskID, s, len(c.Delta), o.cfg.ResultMaxBytes)
	switch res {
	case chunkDrop:
		o.metrics.dropped.WithLabelValues("chunk").Inc()
	case chunkTooLarge:
		o.cancelOnNode(&ent, CodeResultTooLarge)
		o.reply(&ent, &bus.Envelope{Kind: bus.KindResult, Result: &bus.Result{
			Code: CodeResultTooLarge, Message: o.tooLarge(),
		}})
	case chunkForward:
		if !ent.stream {
			return // a plain task waits for the result; its chunks go nowhere
		}
		if o.reply(&ent, &bus.Envelope{Kind: bus.KindChunk, Seq: ent.seq, Delta: c.Delta}) <= 0 {
			// Invariant 5: the requester is gone (or out of reach: a lost
			// chunk breaks its stream anyway), so nobody will read the rest.
			if gone := o.fwd.take(c.TaskID, s); gone != nil {
				o.cancelOnNode(gone, "requester gone")
			}
		}
	}
}

// Result implements nodes.Events.
func (o *Owner) Result(s *nodes.Session, r nodes.ResultPayload) {
	ent := o.fwd.take(r.TaskID, s)
	if ent == nil {
		o.metrics.dropped.WithLabelValues("result").Inc()
		return
	}
	s.Release()
	res := &bus.Result{
		Status: r.Status, Text: r.Result, ProcessingMs: r.ProcessingMs, Chunks: ent.seq,
		HasUsage: r.HasUsage, PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens,
	}
	if int64(len(r.Result)) > o.cfg.ResultMaxBytes {
		res = &bus.Result{Code: CodeResultTooLarge, Message: o.tooLarge()}
	}
	o.reply(ent, &bus.Envelope{Kind: bus.KindResult, Result: res})
}

// BadResult implements nodes.Events: an unreadable task_result fails its
// task now, as a handler failure, rather than leaving the client to time out.
func (o *Owner) BadResult(s *nodes.Session, taskID string, err error) {
	ent := o.fwd.take(taskID, s)
	if ent == nil {
		return
	}
	s.Release()
	o.reply(ent, &bus.Envelope{Kind: bus.KindResult, Result: &bus.Result{
		Status: "failed", Text: "the node sent an invalid task_result: " + err.Error(), Chunks: ent.seq,
		ProcessingMs: -1,
	}})
}

// Closed implements nodes.Events: every task the node held fails now.
func (o *Owner) Closed(s *nodes.Session) {
	for _, ent := range o.fwd.takeSession(s) {
		s.Release()
		o.reply(ent, &bus.Envelope{Kind: bus.KindNodeGone, Reason: "node disconnected"})
	}
}

// reply sends an envelope about ent's task to its requester and returns how
// many received it (-1: unknown, the bus failed).
func (o *Owner) reply(ent *fwdEntry, e *bus.Envelope) int {
	e.From, e.TaskID, e.NodeID, e.Gen = o.cfg.Instance, ent.taskID, ent.nodeID, ent.gen
	if ent.replyTo == o.cfg.Instance {
		if o.local(e) {
			return 1
		}
		return 0
	}
	o.metrics.hops.WithLabelValues(e.Kind.String()).Inc()
	n, err := o.bus.Publish(o.ctx, ent.replyTo, e)
	if err != nil {
		o.log.Warn("cannot reach the requester instance", "task_id", ent.taskID, "to", ent.replyTo, "err", err)
		return -1
	}
	return n
}

func (o *Owner) tooLarge() string {
	return fmt.Sprintf("the node's result is larger than %d bytes", o.cfg.ResultMaxBytes)
}

// HandleEnvelope acts on an envelope addressed to the owner side: assign,
// cancel or replace. It never blocks.
func (o *Owner) HandleEnvelope(e *bus.Envelope) {
	switch e.Kind {
	case bus.KindAssign:
		if err := o.Assign(e); err != nil {
			ae := AsError(err)
			o.reply(&fwdEntry{taskID: e.TaskID, nodeID: e.NodeID, gen: e.Gen, replyTo: e.ReplyTo},
				&bus.Envelope{Kind: bus.KindResult, Result: &bus.Result{Code: ae.Code, Message: ae.Message}})
		}
	case bus.KindCancel:
		o.Cancel(e)
	case bus.KindReplace:
		if o.sessions.CloseReplaced(e.NodeID, e.Gen) {
			o.metrics.replaced.Inc()
		}
	}
}

// sweep cancels tasks past their deadline whose requester never said so
// (it died, or its cancel was lost), so no entry outlives its task.
func (o *Owner) sweep(now time.Time) {
	for _, ent := range o.fwd.expired(now) {
		o.cancelOnNode(ent, "deadline passed")
	}
}

// requesterGone cancels every task of a requester instance that is gone
// (DESIGN §5, invariant 5).
func (o *Owner) requesterGone(instance string) int {
	ents := o.fwd.takeRequester(instance)
	for _, ent := range ents {
		o.cancelOnNode(ent, "requester gone")
	}
	return len(ents)
}
