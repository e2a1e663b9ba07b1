package store

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WriterConfig configures a Writer. Zero values mean the defaults noted.
type WriterConfig struct {
	// FlushInterval is how often buffered items are written. Default 200ms.
	FlushInterval time.Duration
	// BatchSize is the most task records (and, separately, outcomes and
	// usage reports) written in one transaction; a full batch is written
	// without waiting for the interval. Default 500.
	BatchSize int
	// MaxPending bounds the task records, outcomes and usage reports held
	// in memory, including a batch being written or retried. Beyond it new
	// items are dropped and counted: a slow or absent database must never
	// slow or block a request. Default 20000.
	MaxPending int
	// WriteTimeout bounds one background database write. Default 10s.
	WriteTimeout time.Duration
	// FinalFlushTimeout bounds the final flush when Run's context ends:
	// the write under way, then what is left, retried with backoff, must be
	// done within it. Default 10s.
	FinalFlushTimeout time.Duration
	// Registerer receives the writer's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c WriterConfig) withDefaults() WriterConfig {
	if c.FlushInterval <= 0 {
		c.FlushInterval = 200 * time.Millisecond
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 500
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 20000
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.FinalFlushTimeout <= 0 {
		c.FinalFlushTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("component", "store_writer")
	return c
}

// maxBackoff caps the wait between retries of a failing write, so that
// writing resumes within seconds of the database coming back.
const maxBackoff = 10 * time.Second

// Writer takes task records, node outcomes and usage reports from the
// request path and writes them in batches from one goroutine, Run's.
// Adding never blocks and never does I/O; what is buffered is bounded by
// MaxPending.
//
// NewWriter starts nothing. Before Run, the Writer takes items (they wait
// in the buffer, counted against MaxPending), finds them (LookupTask, Task)
// and writes on demand (Flush, Rate); only the batches written on their own
// wait for Run.
//
// Items stay at the head of their queue until their batch commits: a batch
// the database could not take is simply written again, LookupTask finds
// records that are being written, and Reputation can tell which outcomes
// the database has not seen. A batch the database refused is split until
// the records it refuses are alone, and those are set aside in the
// dead_letters table (settle), so that no record holds up the others.
type Writer struct {
	st  Store
	cfg WriterConfig
	log *slog.Logger
	m   writerMetrics

	// flushMu makes flushes take turns, so batches commit in queue order and
	// only the holder removes items from the queue heads.
	flushMu sync.Mutex
	// applyMu is held across each ApplyOutcomes and the removal of its batch
	// from the queue. Reputation holds it while it reads counters from the
	// database, so that every outcome is either in what it read or still in
	// the queue, never both or neither (see Reputation.reload).
	applyMu sync.Mutex

	mu       sync.Mutex
	seq      uint64 // last sequence number handed out
	tasks    []pendingTask
	index    map[string]TaskRecord // ids of tasks, for LookupTask
	outs     []pendingOutcome
	usage    []pendingUsage
	susp     map[string]time.Time // node id -> suspended until, not yet written
	closed   bool
	dropping bool // an episode of drops is under way (logged once)

	dropped      atomic.Int64
	deadLettered atomic.Int64

	kick chan struct{} // a full batch is waiting
}

type pendingTask struct {
	rec   TaskRecord
	added time.Time
	seq   uint64
}

type pendingOutcome struct {
	out Outcome
	seq uint64
}

type pendingUsage struct {
	rep UsageReport
	seq uint64
}

func (p pendingTask) seqNo() uint64    { return p.seq }
func (p pendingOutcome) seqNo() uint64 { return p.seq }
func (p pendingUsage) seqNo() uint64   { return p.seq }

// NewWriter returns a Writer over st. Run writes what it is given.
func NewWriter(st Store, cfg WriterConfig) *Writer {
	cfg = cfg.withDefaults()
	return &Writer{
		st:    st,
		cfg:   cfg,
		log:   cfg.Logger,
		m:     newWriterMetrics(cfg.Registerer, cfg.Logger),
		index: make(map[string]TaskRecord),
		susp:  make(map[string]time.Time),
		kick:  make(chan struct{}, 1),
	}
}

// AddTask queues a finished task's record. It never blocks: when the buffer
// is full, or Run has stopped, the record is dropped and counted. A second
// record with an ID already queued is ignored (WriteTasks keeps the first).
func (w *Writer) AddTask(rec TaskRecord) {
	if rec.ID == "" {
		w.drop(KindTask, "task record without an id")
		return
	}
	now := time.Now()
	w.mu.Lock()
	if _, dup := w.index[rec.ID]; dup {
		w.mu.Unlock()
		return
	}
	if !w.admitLocked() {
		w.mu.Unlock()
		w.drop(KindTask, "")
		return
	}
	w.seq++
	w.tasks = append(w.tasks, pendingTask{rec: rec, added: now, seq: w.seq})
	w.index[rec.ID] = rec
	full := len(w.tasks) >= w.cfg.BatchSize
	w.m.pending.Set(float64(w.pendingLocked()))
	w.mu.Unlock()
	if full {
		w.kickLoop()
	}
}

// AddOutcome queues a node's outcome for its counters, like AddTask. A zero
// At is taken as now.
func (w *Writer) AddOutcome(o Outcome) {
	if o.NodeID == "" {
		w.drop(KindOutcome, "outcome without a node id")
		return
	}
	if o.At.IsZero() {
		o.At = time.Now()
	}
	w.mu.Lock()
	if !w.admitLocked() {
		w.mu.Unlock()
		w.drop(KindOutcome, "")
		return
	}
	w.seq++
	w.outs = append(w.outs, pendingOutcome{out: o, seq: w.seq})
	full := len(w.outs) >= w.cfg.BatchSize
	w.m.pending.Set(float64(w.pendingLocked()))
	w.mu.Unlock()
	if full {
		w.kickLoop()
	}
}

// AddUsage queues a node's usage report, like AddTask. A zero At is taken
// as now. A report already queued or stored for the same task and node is
// kept once (WriteUsage keeps the first).
func (w *Writer) AddUsage(r UsageReport) {
	if r.TaskID == "" || r.NodeID == "" {
		w.drop(KindUsage, "usage report without a task id or a node id")
		return
	}
	if r.At.IsZero() {
		r.At = time.Now()
	}
	w.mu.Lock()
	if !w.admitLocked() {
		w.mu.Unlock()
		w.drop(KindUsage, "")
		return
	}
	w.seq++
	w.usage = append(w.usage, pendingUsage{rep: r, seq: w.seq})
	full := len(w.usage) >= w.cfg.BatchSize
	w.m.pending.Set(float64(w.pendingLocked()))
	w.mu.Unlock()
	if full {
		w.kickLoop()
	}
}

// pendingLocked is how many items are held, written or not.
func (w *Writer) pendingLocked() int { return len(w.tasks) + len(w.outs) + len(w.usage) }

// admitLocked reports whether one more item fits. A dropping episode ends
// (and the next one is logged again) once the buffer has drained to 90%, so
// that a buffer hovering at the limit logs once, not at every flush.
func (w *Writer) admitLocked() bool {
	n := w.pendingLocked()
	if w.closed || n >= w.cfg.MaxPending {
		return false
	}
	if w.dropping && n < w.cfg.MaxPending-w.cfg.MaxPending/10 {
		w.dropping = false
	}
	return true
}

// drop counts a dropped item; it logs the first of an episode only, since
// drops come at request rate.
func (w *Writer) drop(kind, invalid string) {
	w.dropped.Add(1)
	w.m.dropped.WithLabelValues(kind).Inc()
	if invalid != "" {
		w.log.Error("store writer dropped an invalid item", "kind", kind, "reason", invalid)
		return
	}
	w.mu.Lock()
	first := !w.dropping
	w.dropping = true
	closed := w.closed
	pending := w.pendingLocked()
	w.mu.Unlock()
	if first {
		w.log.Warn("store writer is dropping items", "kind", kind, "closed", closed, "pending", pending,
			"max_pending", w.cfg.MaxPending)
	}
}

func (w *Writer) kickLoop() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// LookupTask returns a record that has not been committed yet (queued, or
// in a batch being written), so that a task can be read and rated the moment
// it finishes.
func (w *Writer) LookupTask(id string) (TaskRecord, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rec, ok := w.index[id]
	return rec, ok
}

// Task returns a task from the buffer or, failing that, from the store.
func (w *Writer) Task(ctx context.Context, id string) (TaskRecord, error) {
	if rec, ok := w.LookupTask(id); ok {
		return rec, nil
	}
	return w.st.Task(ctx, id)
}

// Rate is Store.Rate for a task that may still be buffered: such a record is
// written first (WriteTasks keeps the first copy, so the batch writing it
// again later is harmless).
func (w *Writer) Rate(ctx context.Context, taskID, accountID string, rating int, now time.Time) ([]string, error) {
	if rec, ok := w.LookupTask(taskID); ok {
		if err := w.st.WriteTasks(ctx, []TaskRecord{rec}); err != nil {
			return nil, err
		}
	}
	return w.st.Rate(ctx, taskID, accountID, rating, now)
}

// WriterStats is a snapshot of the Writer's buffer.
type WriterStats struct {
	PendingTasks    int   `json:"pending_tasks"`
	PendingOutcomes int   `json:"pending_outcomes"`
	PendingUsage    int   `json:"pending_usage"`
	Dropped         int64 `json:"dropped"`
	// DeadLetters counts the records the store refused and this writer
	// set aside (the dead_letters table holds every instance's).
	DeadLetters int64 `json:"dead_letters"`
}

// Stats returns the current buffer sizes, and the drops and dead letters
// so far.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return WriterStats{PendingTasks: len(w.tasks), PendingOutcomes: len(w.outs), PendingUsage: len(w.usage),
		Dropped: w.dropped.Load(), DeadLetters: w.deadLettered.Load()}
}

// Flush writes everything buffered when it is called, setting aside what
// the database refuses. When the database cannot be written to, it returns
// the error and keeps the items not written yet for the next attempt.
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	mark := w.seq
	w.mu.Unlock()
	return w.flush(ctx, mark)
}

// Run writes what is buffered, every FlushInterval or at once when a batch
// is full, until ctx ends. Then it takes no more items (AddTask,
// AddOutcome and AddUsage drop from then on) and writes what is left,
// retrying with backoff, within FinalFlushTimeout of ctx's end. It returns nil once
// everything was written (or, refused by the database, set aside), or an
// error naming what could not be; those items stay buffered, so a later
// Flush may still write them. Run once.
func (w *Writer) Run(ctx context.Context) error {
	// The write under way when ctx ends and the final flush share one
	// budget: they outlive ctx by FinalFlushTimeout at most.
	wctx, stop := afterEnd(ctx, w.cfg.FinalFlushTimeout)
	defer stop()
	w.loop(ctx, wctx)
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	return w.drain(wctx)
}

// afterEnd returns a context that ends d after ctx does (never before),
// and a func that releases it.
func afterEnd(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	released := false
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !released {
			timer = time.AfterFunc(d, cancel)
		}
	})
	return out, func() {
		stopAfter()
		mu.Lock()
		released = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

func (w *Writer) drain(ctx context.Context) error {
	for failures := 1; ; failures++ {
		err := w.flush(ctx, math.MaxUint64)
		if err == nil {
			return nil
		}
		t := time.NewTimer(backoff(w.cfg.FlushInterval, failures))
		select {
		case <-t.C:
			continue
		case <-ctx.Done():
			t.Stop()
		}
		st := w.Stats()
		w.log.Error("store writer stopped with items unwritten", "tasks", st.PendingTasks, "outcomes", st.PendingOutcomes,
			"usage_reports", st.PendingUsage, "err", err)
		return fmt.Errorf("store: writer stopped with %d task records, %d outcomes and %d usage reports unwritten: %w",
			st.PendingTasks, st.PendingOutcomes, st.PendingUsage, err)
	}
}

// loop writes every FlushInterval, or at once when a batch is full; after
// a failure it waits with backoff instead. It returns when ctx ends; its
// writes are bounded by wctx (and WriteTimeout).
func (w *Writer) loop(ctx, wctx context.Context) {
	t := time.NewTimer(w.cfg.FlushInterval)
	defer t.Stop()
	failures := 0
	for {
		kick := w.kick
		if failures > 0 {
			kick = nil // a full batch does not cut a backoff short
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
			t.Stop() // Go 1.23+ timers: no stale tick is left to drain
		}
		// Up to what is queued now: under a steady stream the loop still
		// comes back to check ctx between rounds.
		w.mu.Lock()
		mark := w.seq
		w.mu.Unlock()
		fctx, cancel := context.WithTimeout(wctx, w.cfg.WriteTimeout)
		err := w.flush(fctx, mark)
		cancel()
		switch {
		case err == nil:
			if failures > 0 {
				w.log.Info("store writes recovered", "failed_attempts", failures)
			}
			failures = 0
			t.Reset(w.cfg.FlushInterval)
		default:
			failures++
			wait := backoff(w.cfg.FlushInterval, failures)
			if failures == 1 {
				st := w.Stats()
				w.log.Warn("store write failed; keeping the batch and retrying", "err", err,
					"pending_tasks", st.PendingTasks, "pending_outcomes", st.PendingOutcomes, "pending_usage", st.PendingUsage)
			} else {
				w.log.Debug("store write failed again", "err", err, "attempt", failures, "retry_in", wait)
			}
			t.Reset(wait)
		}
	}
}

// backoff is the wait before retry number failures (1, 2, ...): the flush
// interval doubled per failure up to maxBackoff, with ±20% jitter so that
// instances sharing a recovering database spread out.
func backoff(base time.Duration, failures int) time.Duration {
	d := maxBackoff
	if failures < 30 && base<<(failures-1) < maxBackoff {
		d = base << (failures - 1)
	}
	return d + time.Duration(float64(d)*(rand.Float64()*0.4-0.2))
}

// flush writes batches until no item with a sequence number up to mark is
// left, or a write fails.
func (w *Writer) flush(ctx context.Context, mark uint64) error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	for {
		wrote := false
		if batch := head(w, &w.tasks, mark); len(batch) > 0 {
			if err := w.writeTasks(ctx, batch); err != nil {
				return err
			}
			wrote = true
		}
		if batch := head(w, &w.outs, mark); len(batch) > 0 {
			if err := w.writeOutcomes(ctx, batch); err != nil {
				return err
			}
			wrote = true
		}
		if batch := head(w, &w.usage, mark); len(batch) > 0 {
			if err := w.writeUsage(ctx, batch); err != nil {
				return err
			}
			wrote = true
		}
		if !wrote {
			break
		}
	}
	return w.writeSuspensions(ctx)
}

// head copies up to BatchSize items from the head of the queue q (one of
// w's) with sequence numbers up to mark. They stay queued until their
// batch's write removes them.
func head[T interface{ seqNo() uint64 }](w *Writer, q *[]T, mark uint64) []T {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for n < len(*q) && n < w.cfg.BatchSize && (*q)[n].seqNo() <= mark {
		n++
	}
	return slices.Clone((*q)[:n])
}

// settle writes batch, the head of one of w's queues, with write, and
// returns how many of its items, from the first, are settled: committed, or
// refused by the store and set aside (their indexes in aside). The rest,
// from the first item the store could not answer for, stay queued, and err
// says why.
//
// A batch the store refuses (classRefused: the data's fault, not the
// store's) is split in halves, each written on its own and split again
// while refused, down to the records refused alone, which go to the
// dead_letters table (bury): a record that can never be written must not
// hold up the ones queued with it and behind it (invariant 17: no record
// blocks the others). The halves are written in queue order, so what is
// settled is always a prefix of the batch. A batch that is not refused
// costs what it always did: one write.
func settle[T any](ctx context.Context, w *Writer, kind string, batch []T, write func([]T) error,
	letter func(T) DeadLetter) (settled int, aside []int, err error) {
	err = w.timed(func() error { return write(batch) })
	if !refused(err) {
		if err != nil {
			return 0, nil, err
		}
		return len(batch), nil, nil
	}
	var dls []DeadLetter
	var split func(off int, items []T, why error) (int, error)
	split = func(off int, items []T, why error) (int, error) {
		if len(items) == 1 {
			d := letter(items[0])
			d.Kind, d.Error, d.At = kind, why.Error(), time.Now()
			dls = append(dls, d)
			aside = append(aside, off)
			return 1, nil
		}
		mid, done := len(items)/2, 0
		for _, h := range [2][2]int{{0, mid}, {mid, len(items)}} {
			part := items[h[0]:h[1]]
			err := w.timed(func() error { return write(part) })
			switch {
			case err == nil:
				done += len(part)
			case refused(err):
				n, err := split(off+h[0], part, err)
				done += n
				if err != nil {
					return done, err
				}
			default:
				return done, err
			}
		}
		return done, nil
	}
	settled, err = split(0, batch, err)
	w.bury(ctx, dls)
	return settled, aside, err
}

// timed runs one write, timing it and counting its failure.
func (w *Writer) timed(f func() error) error {
	start := time.Now()
	err := f()
	w.m.flushDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		w.m.flushErrors.Inc()
	}
	return err
}

// deadLetterOf is the dead letter of a record the store refused: its JSON,
// whole (the store keeps a bounded prefix).
func deadLetterOf(taskID, accountID string, rec any) DeadLetter {
	js, err := json.Marshal(rec)
	if err != nil { // the records are plain structs: never, but say so if it happens
		js = []byte(fmt.Sprintf("%q", fmt.Sprintf("cannot encode the record: %v", err)))
	}
	return DeadLetter{TaskID: taskID, AccountID: accountID, Record: string(js)}
}

// bury counts and logs the records set aside and keeps them in the
// dead_letters table. If even that write fails, they are dropped (counted
// apart, and logged with what the table would have kept): a dead letter
// must never hold up the queue it was taken out of.
func (w *Writer) bury(ctx context.Context, dls []DeadLetter) {
	if len(dls) == 0 {
		return
	}
	for _, d := range dls {
		w.deadLettered.Add(1)
		w.m.deadLetters.WithLabelValues(d.Kind).Inc()
		w.log.Warn("the store refused a record; it is set aside in dead_letters and the others are written",
			"kind", d.Kind, "task_id", d.TaskID, "account_id", d.AccountID, "record_bytes", len(d.Record), "err", d.Error)
	}
	err := w.st.WriteDeadLetters(ctx, dls)
	if err == nil {
		return
	}
	w.m.deadLetterErrors.Add(float64(len(dls)))
	for _, d := range dls {
		d = d.bounded()
		w.log.Error("cannot keep a refused record in dead_letters either; dropping it", "kind", d.Kind, "task_id", d.TaskID,
			"refusal", d.Error, "record", d.Record, "record_bytes", d.RecordBytes, "err", err)
	}
}

func (w *Writer) writeTasks(ctx context.Context, batch []pendingTask) error {
	n, aside, err := settle(ctx, w, KindTask, batch, func(b []pendingTask) error {
		recs := make([]TaskRecord, len(b))
		for i, p := range b {
			recs[i] = p.rec
		}
		return w.st.WriteTasks(ctx, recs)
	}, func(p pendingTask) DeadLetter { return deadLetterOf(p.rec.ID, p.rec.AccountID, p.rec) })
	if n == 0 {
		return err
	}
	committed := time.Now()
	w.mu.Lock()
	// Only the flushMu holder removes from the head, so the first n items
	// are still exactly the batch's first n.
	w.tasks = slices.Delete(w.tasks, 0, n)
	for _, p := range batch[:n] {
		delete(w.index, p.rec.ID)
	}
	w.m.pending.Set(float64(w.pendingLocked()))
	w.mu.Unlock()
	for i, p := range batch[:n] {
		if !slices.Contains(aside, i) {
			w.m.batchLag.Observe(committed.Sub(p.added).Seconds())
		}
	}
	return err
}

func (w *Writer) writeOutcomes(ctx context.Context, batch []pendingOutcome) error {
	w.applyMu.Lock()
	defer w.applyMu.Unlock()
	n, _, err := settle(ctx, w, KindOutcome, batch, func(b []pendingOutcome) error {
		outs := make([]Outcome, len(b))
		for i, p := range b {
			outs[i] = p.out
		}
		return w.st.ApplyOutcomes(ctx, outs)
	}, func(p pendingOutcome) DeadLetter { return deadLetterOf("", p.out.Account, p.out) })
	if n == 0 {
		return err
	}
	w.mu.Lock()
	w.outs = slices.Delete(w.outs, 0, n)
	w.m.pending.Set(float64(w.pendingLocked()))
	w.mu.Unlock()
	return err
}

func (w *Writer) writeUsage(ctx context.Context, batch []pendingUsage) error {
	n, _, err := settle(ctx, w, KindUsage, batch, func(b []pendingUsage) error {
		reps := make([]UsageReport, len(b))
		for i, p := range b {
			reps[i] = p.rep
		}
		return w.st.WriteUsage(ctx, reps)
	}, func(p pendingUsage) DeadLetter { return deadLetterOf(p.rep.TaskID, p.rep.AccountID, p.rep) })
	if n == 0 {
		return err
	}
	w.mu.Lock()
	w.usage = slices.Delete(w.usage, 0, n)
	w.m.pending.Set(float64(w.pendingLocked()))
	w.mu.Unlock()
	return err
}

// addSuspension queues a node's suspension for the database; the newest
// time for a node wins.
func (w *Writer) addSuspension(nodeID string, until time.Time) {
	w.mu.Lock()
	w.susp[nodeID] = until
	w.mu.Unlock()
	w.kickLoop()
}

func (w *Writer) writeSuspensions(ctx context.Context) error {
	w.mu.Lock()
	todo := make(map[string]time.Time, len(w.susp))
	for id, until := range w.susp {
		todo[id] = until
	}
	w.mu.Unlock()
	for id, until := range todo {
		err := w.timed(func() error { return w.st.Suspend(ctx, id, until) })
		if refused(err) {
			d := deadLetterOf("", "", map[string]any{"node_id": id, "until": until})
			d.Kind, d.Error, d.At = KindSuspension, err.Error(), time.Now()
			w.bury(ctx, []DeadLetter{d})
		} else if err != nil {
			return err
		}
		w.mu.Lock()
		if w.susp[id].Equal(until) { // not superseded meanwhile
			delete(w.susp, id)
		}
		w.mu.Unlock()
	}
	return nil
}

// pendingOutcomes returns copies of the outcomes not yet committed for the
// given nodes. Callers that need an exact split between committed and not
// hold applyMu (see Reputation.reload).
func (w *Writer) pendingOutcomes(nodes map[string]bool) []Outcome {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Outcome
	for _, p := range w.outs {
		if nodes[p.out.NodeID] {
			out = append(out, p.out)
		}
	}
	return out
}
