package async

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/streamlog"
	"github.com/switchyard-dev/switchyard/tasks"
)

// The pump's figures, in one place (docs/OPERATIONS.md lists them).
const (
	// Lease is how long a claim holds a task unless renewed; RenewEvery how
	// often an instance renews all of its leases (one statement).
	Lease      = 15 * time.Second
	RenewEvery = 5 * time.Second
	// ReleaseEvery is how often an instance releases the lapsed leases and
	// those of lost instances; MaxAttempts is how many claims a task gets
	// before a lost lease fails it (instance_lost): one retry.
	ReleaseEvery = 5 * time.Second
	MaxAttempts  = 2
	// PurgeEvery is how often expired final tasks are deleted.
	PurgeEvery = time.Minute
	// Poll is the backstop for lost wake-ups: an idle instance with a free
	// local node makes one claim query per Poll, none without one.
	Poll = time.Second
	// OutboxEvery is how often an instance looks for ended tasks whose
	// webhook was never queued (their instance died between the two), and
	// OutboxAge how long ago they must have ended.
	OutboxEvery = 30 * time.Second
	OutboxAge   = 30 * time.Second
	// WaitRecheck is how often a waiter (?wait) re-reads its task, for an
	// end whose event was lost.
	WaitRecheck = 2 * time.Second
	// LocalRetry is how long a claimed task that found no free local node
	// (it left, or a synchronous request took its slot) is retried here
	// before it fails: the queue has no way to give a claim back.
	LocalRetry = 30 * time.Second
	// maxBackoff bounds the wait after a store error (a stalled database).
	maxBackoff  = 10 * time.Second
	storeWrites = 5 * time.Second // the bound of one end's write
)

// Runner runs one task to its end: the task engine (tasks.Engine).
type Runner interface {
	RunTask(ctx context.Context, req tasks.Request, h tasks.Hooks) (tasks.Outcome, error)
}

// Free is what this instance's nodes can take now of one task type.
type Free struct {
	TaskType string
	Slots    int // free slots of serving local nodes with the type
	Official int // of those, the slots of official nodes
}

// Local is the pump's view of this instance's nodes.
type Local interface {
	// Free lists the task types whose local nodes have a free slot, and
	// no synchronous request waits for one here (it comes first).
	Free() []Free
}

// Broadcast carries events to every instance's pump (Heard). nil: this
// instance is alone.
type Broadcast interface {
	Publish(ctx context.Context, e Event) error
}

// Config configures a Pump.
type Config struct {
	Instance   string                // this instance's id (required): the owner of its leases
	Logger     *slog.Logger          // default slog.Default()
	Registerer prometheus.Registerer // nil: metrics not registered
}

// Deps are the pump's collaborators. Queue, Runner and Local are required.
type Deps struct {
	Queue     store.AsyncQueue
	Runner    Runner
	Local     Local
	Broadcast Broadcast // nil: alone, events stay in this process
	// Lost lists the instances known to be gone (the registry's dead);
	// nil: none (alone, or only lapsed leases are released).
	Lost     func(ctx context.Context) ([]string, error)
	Webhooks Webhooks // nil: NoWebhooks
	// Streams keeps the chunks of tasks submitted with stream: true for
	// GET /api/v1/tasks/{id}/stream (streamlog.Log); nil: none are kept.
	Streams Streams
	// Admission judges each claimed task before it runs (its key's token
	// and budget limits); nil: every task runs.
	Admission Admission
}

// Admission is what a claimed task must pass before it runs: a task
// queued while its key could still spend may find it spent when claimed.
type Admission interface {
	// Admit holds what t may spend until release is called, after t's
	// end. An error refuses t: it fails with the error's code (a
	// *tasks.Error's) and message, and its webhook is told, instead of
	// running; unless the error is ErrNotYet, and then the claim asks
	// again every AdmitRetry, for up to LocalRetry, then gives the task
	// back to the queue.
	Admit(ctx context.Context, t store.AsyncTask) (release func(), err error)
}

// ErrNotYet is an Admission's refusal of a task that may be admitted in
// a moment: what its key's tasks under way hold is in the way, and their
// ends may leave room.
var ErrNotYet = errors.New("async: not admitted yet")

// AdmitRetry is how often a claimed task that was not admitted yet
// (ErrNotYet) asks again.
const AdmitRetry = 500 * time.Millisecond

// Streams is the chunk log of resumable streams (streamlog.Log).
type Streams interface {
	Append(ctx context.Context, taskID, data string) (int64, error)
	End(ctx context.Context, taskID string, final []byte) error
}

var (
	errCancelled = errors.New("async: cancel requested")
	errShutdown  = errors.New("async: the instance is stopping")
)

// Pump is one instance's async side. New builds it and starts nothing;
// Run claims, runs and sweeps. Submit, Cancel, Wait, Heard and Nudge work
// before Run: a task submitted then waits in the queue for a Run, here or
// at another instance.
type Pump struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	metrics *metrics

	wake chan struct{} // cap 1: look for work now
	// work is false once a claim found the queue empty, until something
	// may have queued a task (a submit heard, a lease released, the
	// poll): a freed slot then costs no query.
	work     atomic.Bool
	draining atomic.Bool
	// publishFailing is set while broadcasts fail (logged once per episode).
	publishFailing atomic.Bool

	mu       sync.Mutex
	jobs     map[string]*job                     // running here, by task id
	starting map[string]int                      // claimed, not yet on a node, by task type
	waiters  map[string]map[chan struct{}]string // task id → its waiters
}

type job struct {
	cancel context.CancelCauseFunc
}

// New builds the pump; Run runs it.
func New(cfg Config, deps Deps) *Pump {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if deps.Webhooks == nil {
		deps.Webhooks = NoWebhooks{}
	}
	p := &Pump{cfg: cfg, deps: deps, log: cfg.Logger, metrics: newMetrics(cfg.Registerer),
		wake: make(chan struct{}, 1), jobs: map[string]*job{}, starting: map[string]int{},
		waiters: map[string]map[chan struct{}]string{}}
	p.work.Store(true)
	p.metrics.gauges(func() float64 { return float64(p.Running()) }, func() float64 { return float64(p.Waiters()) })
	return p
}

// Run claims tasks while a local node can take one and runs them, renews
// their leases, releases lost ones and empties the webhook outbox, until
// ctx ends. Then it stops the tasks still running here and waits for them:
// they are not ended, their leases lapse and another instance runs them
// again (a drain lets them finish first). It returns nil. Run once.
func (p *Pump) Run(ctx context.Context) error {
	// The tasks' contexts end with errShutdown when ctx does, so that each
	// tells the pump's stop from a cancel.
	run, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	unhook := context.AfterFunc(ctx, func() { stop(errShutdown) })
	defer unhook()
	var wg sync.WaitGroup // the loops, and the tasks the claim loop starts
	wg.Go(func() { p.claimLoop(run, &wg) })
	wg.Go(func() { p.renewLoop(run) })
	wg.Go(func() { p.sweepLoop(run) })
	wg.Wait()
	return nil
}

// Drain stops claiming (the instance is draining); tasks running finish.
func (p *Pump) Drain() { p.draining.Store(true) }

// Running is the number of async tasks running here.
func (p *Pump) Running() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.jobs)
}

// Waiters is the number of ?wait requests waiting here.
func (p *Pump) Waiters() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, w := range p.waiters {
		n += len(w)
	}
	return n
}

// Nudge says a local slot may have freed: look for work, unless the
// queue was seen empty since the last sign of new work. It never blocks.
func (p *Pump) Nudge() {
	if !p.work.Load() {
		// Every finished task frees a slot: with the queue empty, waking
		// the claimer for each was a wakeup of the process per request.
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Heard takes an event from another instance (or this one). It never blocks.
func (p *Pump) Heard(e Event) {
	switch e.Kind {
	case EventSubmitted:
		p.workQueued()
	case EventEnded:
		p.notify(e.TaskID)
	case EventCancel:
		p.cancelLocal(e.TaskID)
	}
}

// Submit queues a task and wakes every pump.
func (p *Pump) Submit(ctx context.Context, t store.AsyncTask) error {
	if err := p.deps.Queue.SubmitAsync(ctx, t); err != nil {
		return err
	}
	p.metrics.submitted.Inc()
	p.workQueued()
	// The task is queued: the others hear of it even if the client left.
	p.publish(context.WithoutCancel(ctx), Event{Kind: EventSubmitted, TaskID: t.ID, TaskType: t.TaskType})
	return nil
}

// Cancel cancels an account's task (store.AsyncQueue.CancelAsync): a
// queued one ends at once; a running one is stopped on its node, here at
// once, elsewhere when its instance hears of it (an event, or its next
// renewal). The task is returned as the queue answered.
func (p *Pump) Cancel(ctx context.Context, id, accountID string) (store.AsyncTask, error) {
	// Read first, to tell a task this call ends (it was queued) from one
	// that had ended already: only the first is announced.
	before, err := p.deps.Queue.AsyncTask(ctx, id)
	if err != nil {
		return before, err
	}
	t, err := p.deps.Queue.CancelAsync(ctx, id, accountID)
	if err != nil {
		return t, err
	}
	// Done: it is announced even if the client left.
	ctx = context.WithoutCancel(ctx)
	switch {
	case before.Status == store.AsyncQueued && t.Status == store.AsyncCancelled:
		p.ended(ctx, t)
	case t.Status == store.AsyncRunning:
		if !p.cancelLocal(id) {
			p.publish(ctx, Event{Kind: EventCancel, TaskID: id})
		}
	}
	return t, nil
}

// Wait reads a task until its status is final, until passes, or ctx ends
// (then ctx's error). It wakes on an end heard (notify), and re-reads
// every WaitRecheck for an end whose event was lost.
func (p *Pump) Wait(ctx context.Context, id string, until time.Time) (store.AsyncTask, error) {
	for {
		ch := p.watch(id)
		t, err := p.deps.Queue.AsyncTask(ctx, id)
		left := time.Until(until)
		if err != nil || Final(t.Status) || left <= 0 {
			p.unwatch(id, ch)
			return t, err
		}
		timer := time.NewTimer(min(left, WaitRecheck))
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		p.unwatch(id, ch)
		if ctx.Err() != nil {
			return t, ctx.Err()
		}
	}
}

func (p *Pump) watch(id string) chan struct{} {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiters[id] == nil {
		p.waiters[id] = map[chan struct{}]string{}
	}
	p.waiters[id][ch] = id
	return ch
}

func (p *Pump) unwatch(id string, ch chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiters[id], ch)
	if len(p.waiters[id]) == 0 {
		delete(p.waiters, id)
	}
}

// notify wakes the waiters of a task.
func (p *Pump) notify(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ch := range p.waiters[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// cancelLocal stops a task running here; false if it is not here.
func (p *Pump) cancelLocal(id string) bool {
	p.mu.Lock()
	j := p.jobs[id]
	p.mu.Unlock()
	if j == nil {
		return false
	}
	j.cancel(errCancelled)
	return true
}

// workQueued says a task may be queued: the next wake claims.
func (p *Pump) workQueued() {
	p.work.Store(true)
	p.Nudge()
}

// publish broadcasts e, within 2s and ctx.
func (p *Pump) publish(ctx context.Context, e Event) {
	if p.deps.Broadcast == nil {
		return
	}
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := p.deps.Broadcast.Publish(bctx, e)
	switch {
	case err != nil && ctx.Err() == nil:
		// The backstops (Poll, WaitRecheck, the renewal) cover it. Logged
		// once per episode, not per event (Redis away, at submit rate).
		if !p.publishFailing.Swap(true) {
			p.log.Warn("cannot broadcast async events; other instances learn of them at their next poll", "kind", e.Kind, "task_id", e.TaskID, "err", err)
		}
	case err == nil && p.publishFailing.Swap(false):
		p.log.Info("async events are broadcast again")
	}
}

// sleep waits d or until ctx (the pump's Run's) ends; false if it ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// backoff is the next wait after a store error.
func backoff(d time.Duration) time.Duration {
	return min(max(2*d, 250*time.Millisecond), maxBackoff)
}

// claimLoop claims work when woken (a submit, a freed slot) or polled,
// and starts each task claimed under tasks, until ctx ends.
func (p *Pump) claimLoop(ctx context.Context, tasks *sync.WaitGroup) {
	t := time.NewTicker(Poll)
	defer t.Stop()
	var wait time.Duration // after a store error
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-t.C:
			p.work.Store(true) // the backstop: a submit's event may be lost
		}
		if !p.work.Load() {
			continue // a slot freed, and the queue was empty at the last look
		}
		if wait > 0 && !sleep(ctx, wait) {
			return
		}
		if err := p.fill(ctx, tasks); err != nil {
			wait = backoff(wait)
			if ctx.Err() == nil {
				p.log.Warn("cannot claim async tasks; backing off", "retry_in", wait, "err", err)
			}
			continue
		}
		wait = 0
	}
}

// fill claims tasks while a local node can take one. A task claimed and
// not yet on its node holds one slot of its type (starting), so a burst
// of claims never outruns the slots.
func (p *Pump) fill(ctx context.Context, tasks *sync.WaitGroup) error {
	for !p.draining.Load() && ctx.Err() == nil {
		var anyTypes, official []string
		p.mu.Lock()
		for _, f := range p.deps.Local.Free() {
			n := p.starting[f.TaskType]
			switch {
			case f.Official > n:
				official = append(official, f.TaskType)
			case f.Slots > n:
				anyTypes = append(anyTypes, f.TaskType)
			}
		}
		p.mu.Unlock()
		if len(official)+len(anyTypes) == 0 {
			return nil // no slot: a freed one wakes the loop (work stays as it is)
		}
		// Cleared before the query: a submit heard meanwhile sets it again.
		p.work.Store(false)
		claimed := false
		for _, g := range []struct {
			types    []string
			official bool
		}{{official, true}, {anyTypes, false}} {
			if len(g.types) == 0 {
				continue
			}
			t, err := p.deps.Queue.ClaimAsync(ctx, p.cfg.Instance, g.types, g.official, Lease)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				p.work.Store(true)
				return err
			}
			p.work.Store(true)
			if p.draining.Load() {
				// The drain began while the claim was under way: a
				// draining instance starts nothing, so the task goes back
				// to the queue for another instance (or for this one's
				// next start).
				p.giveBack(ctx, t, "the drain began during its claim")
				return nil
			}
			p.start(ctx, tasks, t)
			claimed = true
			break
		}
		if !claimed {
			return nil
		}
	}
	return nil
}

// giveBack returns a claimed task to the queue, unrun, for why (the drain
// began during its claim, say). If the store cannot take it back, its
// lease lapses and the sweep of another instance (or of this one's next
// start) queues it again.
func (p *Pump) giveBack(ctx context.Context, t store.AsyncTask, why string) {
	if err := p.deps.Queue.UnclaimAsync(ctx, t.ID, t.Gen); err != nil {
		p.log.Warn("cannot give back an async task to the queue; its lease will lapse", "task_id", t.ID, "why", why, "err", err)
		return
	}
	p.log.Debug("gave back an async task to the queue", "task_id", t.ID, "why", why)
}

// start runs a claimed task on its own goroutine, under tasks. run is the
// pump's Run's context.
func (p *Pump) start(run context.Context, tasks *sync.WaitGroup, t store.AsyncTask) {
	p.metrics.claimed.Inc()
	ctx, cancel := context.WithCancelCause(run)
	p.mu.Lock()
	p.jobs[t.ID] = &job{cancel: cancel}
	p.starting[t.TaskType]++
	p.mu.Unlock()
	tasks.Go(func() {
		defer cancel(nil)
		p.run(run, ctx, t)
	})
}

// run runs one claimed task through the engine, on local nodes only, and
// ends it. ctx is the task's (a cancel ends it), run the pump's.
func (p *Pump) run(run, ctx context.Context, t store.AsyncTask) {
	// The task holds one of its type's starting slots until a node has it.
	holding := true
	onNode := func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if holding {
			holding = false
			if p.starting[t.TaskType]--; p.starting[t.TaskType] <= 0 {
				delete(p.starting, t.TaskType)
			}
		}
	}
	defer func() {
		onNode()
		p.mu.Lock()
		delete(p.jobs, t.ID)
		p.mu.Unlock()
		p.Nudge() // its slot is free
	}()
	release, ok := p.admit(run, ctx, t)
	if !ok {
		return
	}
	// After the end: the task's record settles its hold first (with what
	// it used); this gives back a hold its end did not reach (a stop of
	// the pump, which leaves the task to another instance).
	defer release()
	req := tasks.Request{TaskID: t.ID, AccountID: t.AccountID, KeyID: t.KeyID, TaskType: t.TaskType, Content: t.Content,
		Params: t.Params, Stream: t.Stream, Trust: t.Trust, Priority: t.Priority, LocalOnly: true}
	var joined strings.Builder
	first := time.Now()
	streamed := false
	for {
		assigned := false
		joined.Reset()
		out, err := p.deps.Runner.RunTask(ctx, req, tasks.Hooks{
			Assigned: func() { assigned = true; onNode() },
			Chunk: func(d string) error {
				joined.WriteString(d)
				if err := p.logChunk(ctx, t, d, !streamed); err != nil {
					return err
				}
				streamed = true
				return nil
			},
		})
		end := store.AsyncEnd{Status: store.AsyncCompleted, NodeID: out.NodeID, Result: out.Result, ProcessingMs: out.ProcessingMs, Usage: out.Usage}
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errShutdown):
			return // not ended: the lease lapses, another instance runs it again
		case errors.Is(cause, errCancelled):
			end = cancelledEnd(out.NodeID)
		case err != nil:
			e := tasks.AsError(err)
			if !assigned && retryLocally(e.Code) && time.Since(first) < LocalRetry {
				// No local node took it yet: wait for one here.
				onNode()
				if !sleep(run, 500*time.Millisecond) {
					return
				}
				p.mu.Lock()
				p.starting[t.TaskType]++
				holding = true
				p.mu.Unlock()
				continue
			}
			end = store.AsyncEnd{Status: store.AsyncFailed, NodeID: out.NodeID, ErrorCode: string(e.Code), ErrorMessage: e.Message}
		case out.Status != tasks.StatusCompleted:
			end.Status, end.ErrorCode, end.ErrorMessage = store.AsyncFailed, string(tasks.CodeTaskFailed), "the node reported a failure"
		}
		if end.Status == store.AsyncCompleted && end.Result == "" && t.Stream {
			end.Result = joined.String()
		}
		p.end(run, t, end)
		return
	}
}

// admit passes a claimed task through Deps.Admission; ok false when the
// task did not pass and is done with here: refused (ended failed with the
// refusal's code), cancelled while it waited (ended cancelled), given
// back to the queue after waiting LocalRetry for room, or the pump stops.
// ctx is the task's, run the pump's.
func (p *Pump) admit(run, ctx context.Context, t store.AsyncTask) (release func(), ok bool) {
	if p.deps.Admission == nil {
		return func() {}, true
	}
	first := time.Now()
	for {
		release, err := p.deps.Admission.Admit(ctx, t)
		if err == nil {
			return release, true
		}
		if errors.Is(err, ErrNotYet) {
			if time.Since(first) >= LocalRetry || p.draining.Load() {
				// Still no room (or no more time here): the slot it holds
				// goes to other work, and the task waits in the queue, its
				// attempt undone.
				p.giveBack(run, t, "its key's tasks under way held what its limits leave")
				return nil, false
			}
			if sleep(ctx, AdmitRetry) {
				continue
			}
		}
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errShutdown):
			return nil, false // not ended: the lease lapses, another instance runs it
		case errors.Is(cause, errCancelled):
			p.end(run, t, cancelledEnd(""))
			return nil, false
		}
		e := tasks.AsError(err)
		p.metrics.refused.Inc()
		p.end(run, t, store.AsyncEnd{Status: store.AsyncFailed, ErrorCode: string(e.Code), ErrorMessage: e.Message})
		return nil, false
	}
}

// cancelledEnd is the end of a task cancelled by its account.
func cancelledEnd(nodeID string) store.AsyncEnd {
	return store.AsyncEnd{Status: store.AsyncCancelled, NodeID: nodeID, ErrorCode: "cancelled", ErrorMessage: "the task was cancelled (DELETE /api/v1/tasks/{id})"}
}

// logChunk keeps a chunk of a stream task for its readers. Before the
// first, the task is marked streamed under its lease: from then on it is
// never run again (a second run would append a second set of chunks), so
// the mark comes first — a holder lost between the two fails the task
// rather than doubling its stream. A refused mark (the lease moved on) or
// chunk (a bound of the log) fails the task.
func (p *Pump) logChunk(ctx context.Context, t store.AsyncTask, d string, first bool) error {
	if !t.Stream || p.deps.Streams == nil {
		return nil
	}
	if first {
		if err := p.deps.Queue.MarkStreamed(ctx, t.ID, t.Gen); err != nil {
			return fmt.Errorf("async: mark task %s streamed: %w", t.ID, err)
		}
	}
	if _, err := p.deps.Streams.Append(ctx, t.ID, d); err != nil {
		return fmt.Errorf("async: keep a chunk of task %s: %w", t.ID, err)
	}
	return nil
}

// retryLocally tells the errors of a task that never reached a node and
// may once one here is free.
func retryLocally(c tasks.Code) bool {
	return c == tasks.CodeNoNode || c == tasks.CodeBusy || c == tasks.CodeUnavailable
}

// end writes a task's end, fenced by its lease's generation. A store
// error is retried (the lease is renewed meanwhile) until the write is
// done, refused (ErrConflict: the lease moved on, so another owns the task
// now) or the pump stops (run, its Run's context, ends).
func (p *Pump) end(run context.Context, t store.AsyncTask, end store.AsyncEnd) {
	var wait time.Duration
	for {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(run), storeWrites)
		done, err := p.deps.Queue.EndAsync(ctx, t.ID, t.Gen, end)
		cancel()
		switch {
		case err == nil:
			p.ended(run, done)
			return
		case errors.Is(err, store.ErrConflict):
			p.metrics.fenced.Inc()
			p.log.Info("an async task's lease moved on before its end was written; dropping this end", "task_id", t.ID, "gen", t.Gen)
			return
		}
		wait = backoff(wait)
		p.log.Warn("cannot write an async task's end; retrying", "task_id", t.ID, "retry_in", wait, "err", err)
		if !sleep(run, wait) {
			return
		}
	}
}

// ended announces a task this instance ended: its waiters everywhere,
// and its webhook. ctx bounds the broadcast; the stream's end and the
// webhook are written even once it has ended.
func (p *Pump) ended(ctx context.Context, t store.AsyncTask) {
	p.metrics.ended.WithLabelValues(t.Status).Inc()
	if t.Stream && p.deps.Streams != nil {
		p.endStream(ctx, t)
	}
	p.notify(t.ID)
	p.publish(ctx, Event{Kind: EventEnded, TaskID: t.ID})
	if t.WebhookURL != "" && t.WebhookPending {
		p.webhook(ctx, t)
	}
}

// endStream closes a stream task's chunk log with its final view, which
// its readers get as the stream's last event. Whoever ends the task ends
// its log (the releaser of a lost instance's task too); one already ended
// is left as it is.
func (p *Pump) endStream(ctx context.Context, t store.AsyncTask) {
	body, err := WebhookBody(t)
	if err != nil {
		p.log.Error("cannot encode an async task's view", "task_id", t.ID, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWrites)
	defer cancel()
	if err := p.deps.Streams.End(ctx, t.ID, body); err != nil && !errors.Is(err, streamlog.ErrEnded) {
		p.log.Warn("cannot end an async task's stream; its readers wait for the log to expire", "task_id", t.ID, "err", err)
	}
}

// webhook queues a task's webhook and clears its outbox mark. On failure
// the mark stays, for the outbox sweep.
func (p *Pump) webhook(ctx context.Context, t store.AsyncTask) {
	body, err := WebhookBody(t)
	if err != nil {
		p.log.Error("cannot encode a webhook", "task_id", t.ID, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWrites)
	defer cancel()
	if err := p.deps.Webhooks.Enqueue(ctx, t.AccountID, t.WebhookURL, t.ID, body); err != nil {
		p.log.Warn("cannot queue a webhook; the outbox sweep retries", "task_id", t.ID, "err", err)
		return
	}
	if err := p.deps.Queue.ClearWebhook(ctx, t.ID); err != nil {
		p.log.Warn("cannot clear a webhook's outbox mark; it may be queued twice", "task_id", t.ID, "err", err)
	}
}

// renewLoop renews this instance's leases, and stops the tasks whose
// cancellation was asked for elsewhere, until ctx ends.
func (p *Pump) renewLoop(ctx context.Context) {
	wait := RenewEvery
	for sleep(ctx, wait) {
		if p.Running() == 0 {
			wait = RenewEvery
			continue // nothing held: no query
		}
		rctx, cancel := context.WithTimeout(ctx, RenewEvery)
		ids, err := p.deps.Queue.RenewAsync(rctx, p.cfg.Instance, Lease)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("cannot renew async leases", "err", err)
			}
			wait = min(backoff(wait), RenewEvery) // a lease is three renewals long: keep trying
			continue
		}
		wait = RenewEvery
		for _, id := range ids {
			p.cancelLocal(id)
		}
	}
}

// sweepLoop releases lost leases, purges expired tasks and empties the
// webhook outbox, until ctx ends.
func (p *Pump) sweepLoop(ctx context.Context) {
	var lastPurge, lastOutbox time.Time
	wait := ReleaseEvery
	for sleep(ctx, wait) {
		if err := p.release(ctx); err != nil {
			wait = backoff(wait)
			if ctx.Err() == nil {
				p.log.Warn("cannot release lost async leases; backing off", "retry_in", wait, "err", err)
			}
			continue
		}
		wait = ReleaseEvery
		if time.Since(lastPurge) >= PurgeEvery {
			lastPurge = time.Now()
			pctx, cancel := context.WithTimeout(ctx, storeWrites)
			if n, err := p.deps.Queue.PurgeAsync(pctx, time.Now()); err != nil {
				p.log.Warn("cannot purge expired async tasks", "err", err)
			} else {
				p.metrics.purged.Add(float64(n))
			}
			cancel()
		}
		if time.Since(lastOutbox) >= OutboxEvery {
			lastOutbox = time.Now()
			p.outbox(ctx)
		}
	}
}

func (p *Pump) release(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, storeWrites)
	defer cancel()
	var lost []string
	if p.deps.Lost != nil {
		var err error
		if lost, err = p.deps.Lost(rctx); err != nil {
			lost = nil // the lapsed leases are still released
		}
	}
	ended, err := p.deps.Queue.ReleaseAsync(rctx, lost, MaxAttempts)
	if err != nil {
		return err
	}
	for _, t := range ended {
		p.metrics.released.WithLabelValues(t.Status).Inc()
		p.ended(ctx, t)
	}
	p.workQueued() // a lease released puts its task back in the queue
	return nil
}

func (p *Pump) outbox(ctx context.Context) {
	octx, cancel := context.WithTimeout(ctx, storeWrites)
	defer cancel()
	pending, err := p.deps.Queue.PendingWebhooks(octx, time.Now().Add(-OutboxAge), 100)
	if err != nil {
		p.log.Warn("cannot read the webhook outbox", "err", err)
		return
	}
	for _, t := range pending {
		p.webhook(ctx, t)
	}
}
