package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/store"
)

func rec(id string) store.TaskRecord {
	now := time.Now()
	return store.TaskRecord{ID: id, AccountID: "acct", TaskType: "chat", Status: store.StatusCompleted,
		NodeIDs: []string{"n1"}, CreatedAt: now.Add(-time.Second), FinishedAt: now}
}

// newWriter returns a running writer over a hook-wrapped SQLite store,
// stopped when the test ends (its Run must then return nil, and goleak
// checks that it left nothing behind).
func newWriter(t *testing.T, cfg store.WriterConfig) (*store.Writer, *hookStore, *prometheus.Registry) {
	t.Helper()
	hs := newHookStore(t, openSQLite(t))
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Logger = reg, quiet
	w := store.NewWriter(hs, cfg)
	stop := runWriter(t, w)
	t.Cleanup(func() {
		hs.mu.Lock()
		if hs.blockTasks != nil {
			select {
			case <-hs.blockTasks:
			default:
				close(hs.blockTasks)
			}
		}
		hs.failAll = false
		hs.mu.Unlock()
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return w, hs, reg
}

// runWriter runs w until stop, which returns Run's error. A test that
// does not call stop has it called when it ends.
func runWriter(t testing.TB, w *store.Writer) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// metric reads one sample from the registry: a counter's or gauge's value,
// or a histogram's sample count. labels are name=value pairs.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("metric %s%v not registered", name, labels)
	return 0
}

func TestWriterWritesFullBatchAtOnce(t *testing.T) {
	// The interval is an hour: only a full batch can trigger this write.
	w, hs, _ := newWriter(t, store.WriterConfig{FlushInterval: time.Hour, BatchSize: 10})
	for i := range 10 {
		w.AddTask(rec(fmt.Sprintf("t-%02d", i)))
	}
	if n := wait(t, hs.taskBatches, "a full batch to be written"); n != 10 {
		t.Errorf("first batch had %d records, want 10", n)
	}
	if _, err := hs.Store.Task(testCtx(t), "t-09"); err != nil {
		t.Errorf("record of the full batch not stored: %v", err)
	}
}

func TestWriterBatchSize(t *testing.T) {
	ctx := testCtx(t)
	w, hs, _ := newWriter(t, store.WriterConfig{FlushInterval: time.Hour, BatchSize: 10})
	for i := range 25 {
		w.AddTask(rec(fmt.Sprintf("t-%02d", i)))
		w.AddOutcome(store.Outcome{NodeID: fmt.Sprintf("n%d", i%3), Success: true, ElapsedMs: 10})
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sum := func(ch chan int, what string) int {
		total := 0
		for {
			select {
			case n := <-ch:
				if n > 10 {
					t.Errorf("a %s batch of %d, over BatchSize 10", what, n)
				}
				total += n
			default:
				return total
			}
		}
	}
	if n := sum(hs.taskBatches, "task"); n != 25 {
		t.Errorf("%d task records written, want 25", n)
	}
	if n := sum(hs.outBatches, "outcome"); n != 25 {
		t.Errorf("%d outcomes written, want 25", n)
	}
	if st := w.Stats(); st.PendingTasks != 0 || st.PendingOutcomes != 0 {
		t.Errorf("after Flush: %+v, want nothing pending", st)
	}
	m, err := hs.Store.NodeStats(ctx, []string{"n0", "n1", "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m["n0"].TotalTasks + m["n1"].TotalTasks + m["n2"].TotalTasks; got != 25 {
		t.Errorf("node counters total %d tasks, want 25", got)
	}
	if m["n0"].LastTaskAt == nil {
		t.Error("an outcome added without a time did not set LastTaskAt (At is filled with now)")
	}
}

func TestWriterLookupTask(t *testing.T) {
	ctx := testCtx(t)
	w, hs, _ := newWriter(t, store.WriterConfig{FlushInterval: time.Hour})
	hs.blockTasks = make(chan struct{})

	r := rec("t-1")
	w.AddTask(r)
	if got, ok := w.LookupTask("t-1"); !ok || got.ID != "t-1" {
		t.Fatalf("LookupTask of a queued record = %v, %v", got.ID, ok)
	}
	if _, ok := w.LookupTask("t-2"); ok {
		t.Error("LookupTask found a record never added")
	}

	flushed := make(chan error, 1)
	go func() { flushed <- w.Flush(ctx) }()
	wait(t, hs.tasksEntered, "the batch write to start")
	// Being written, not committed: still found, by both ways of asking.
	if _, ok := w.LookupTask("t-1"); !ok {
		t.Error("LookupTask lost a record while its batch is being written")
	}
	if got, err := w.Task(ctx, "t-1"); err != nil || got.ID != "t-1" {
		t.Errorf("Writer.Task during the write = %v, %v", got.ID, err)
	}
	if _, err := hs.Store.Task(ctx, "t-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("store has the record before its batch committed: %v", err)
	}
	close(hs.blockTasks)
	if err := wait(t, flushed, "Flush to return"); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.LookupTask("t-1"); ok {
		t.Error("LookupTask still finds a committed record (the buffer index leaks)")
	}
	if got, err := w.Task(ctx, "t-1"); err != nil || got.ID != "t-1" {
		t.Errorf("Writer.Task after commit = %v, %v", got.ID, err)
	}
}

func TestWriterIgnoresDuplicateAndInvalid(t *testing.T) {
	w, _, reg := newWriter(t, store.WriterConfig{FlushInterval: time.Hour})
	w.AddTask(rec("t-1"))
	w.AddTask(rec("t-1"))
	w.AddTask(store.TaskRecord{AccountID: "no id"})
	w.AddOutcome(store.Outcome{Success: true}) // no node
	st := w.Stats()
	if st.PendingTasks != 1 || st.PendingOutcomes != 0 || st.Dropped != 2 {
		t.Errorf("Stats = %+v, want 1 pending task and 2 dropped (the invalid ones; a duplicate is not a drop)", st)
	}
	if got := metric(t, reg, "switchyard_store_dropped_total", "kind", "task"); got != 1 {
		t.Errorf("dropped_total{kind=task} = %v, want 1", got)
	}
}

func TestWriterMaxPending(t *testing.T) {
	ctx := testCtx(t)
	w, hs, reg := newWriter(t, store.WriterConfig{FlushInterval: time.Hour, MaxPending: 5})
	for i := range 4 {
		w.AddTask(rec(fmt.Sprintf("t-%d", i)))
	}
	for range 3 {
		w.AddOutcome(store.Outcome{NodeID: "n1", Success: true})
	}
	w.AddTask(rec("t-over"))

	st := w.Stats()
	if st.PendingTasks != 4 || st.PendingOutcomes != 1 || st.Dropped != 3 {
		t.Errorf("Stats = %+v, want 4 tasks and 1 outcome pending, 3 dropped", st)
	}
	if got := metric(t, reg, "switchyard_store_dropped_total", "kind", "outcome"); got != 2 {
		t.Errorf("dropped_total{kind=outcome} = %v, want 2", got)
	}
	if got := metric(t, reg, "switchyard_store_dropped_total", "kind", "task"); got != 1 {
		t.Errorf("dropped_total{kind=task} = %v, want 1", got)
	}
	if got := metric(t, reg, "switchyard_store_pending_items"); got != 5 {
		t.Errorf("pending_items = %v, want 5", got)
	}
	if _, ok := w.LookupTask("t-over"); ok {
		t.Error("a dropped record is still found")
	}

	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, reg, "switchyard_store_pending_items"); got != 0 {
		t.Errorf("pending_items after Flush = %v, want 0", got)
	}
	if _, err := hs.Store.Task(ctx, "t-3"); err != nil {
		t.Errorf("admitted record not written: %v", err)
	}
	if _, err := hs.Store.Task(ctx, "t-over"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("dropped record was written: %v", err)
	}
	// Room again once written.
	w.AddTask(rec("t-later"))
	if _, ok := w.LookupTask("t-later"); !ok {
		t.Error("no room after the buffer was written")
	}
}

// Usage reports take the same path as task records: queued without I/O,
// counted against MaxPending, written by Flush into the usage rows, and an
// invalid one dropped under its own kind.
func TestWriterUsageReports(t *testing.T) {
	ctx := testCtx(t)
	w, hs, reg := newWriter(t, store.WriterConfig{FlushInterval: time.Hour, MaxPending: 3})
	rep := store.UsageReport{TaskID: "t-1", NodeID: "n1", AccountID: "acct", TaskType: "chat",
		PromptTokens: 5, CompletionTokens: 7, NodeMs: 11, ResultBytes: 13}
	w.AddUsage(rep) // At zero: taken as now
	w.AddTask(rec("t-1"))
	rep.NodeID = "n2"
	w.AddUsage(rep)
	rep.NodeID = "n3"
	w.AddUsage(rep) // over MaxPending
	w.AddUsage(store.UsageReport{TaskID: "t-2"})
	if st := w.Stats(); st.PendingUsage != 2 || st.PendingTasks != 1 || st.Dropped != 2 {
		t.Errorf("Stats = %+v, want 2 reports and 1 task pending, 2 dropped", st)
	}
	if got := metric(t, reg, "switchyard_store_dropped_total", "kind", "usage"); got != 2 {
		t.Errorf("dropped_total{kind=usage} = %v, want 2", got)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rows, err := hs.Store.Usage(ctx, store.UsageQuery{From: now.Add(-time.Hour), To: now})
	if err != nil {
		t.Fatal(err)
	}
	want := store.UsageTotals{Requests: 1, Completed: 1, PromptTokens: 10, CompletionTokens: 14, NodeMs: 22, ResultBytes: 26}
	if len(rows) != 1 || rows[0].UsageTotals != want {
		t.Errorf("usage after Flush = %+v, want one row of %+v (the task, and the reports of n1 and n2)", rows, want)
	}
	if st := w.Stats(); st.PendingUsage != 0 {
		t.Errorf("Stats after Flush = %+v, want nothing pending", st)
	}
}

// A database that hangs must not slow the request path: adding stays
// immediate and the buffer stays bounded while the writer is stuck.
func TestWriterNeverBlocks(t *testing.T) {
	w, hs, _ := newWriter(t, store.WriterConfig{FlushInterval: time.Millisecond, MaxPending: 100})
	hs.blockTasks = make(chan struct{})
	w.AddTask(rec("first"))
	wait(t, hs.tasksEntered, "the writer to be stuck in WriteTasks")

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10000 {
			w.AddTask(rec(fmt.Sprintf("t-%d", i)))
			w.AddOutcome(store.Outcome{NodeID: "n1"})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("AddTask/AddOutcome blocked behind a stuck database")
	}
	st := w.Stats()
	if st.PendingTasks+st.PendingOutcomes != 100 || st.Dropped != 20001-100 {
		t.Errorf("Stats = %+v, want 100 pending and %d dropped", st, 20001-100)
	}
}

func TestWriterRetriesWithBackoff(t *testing.T) {
	ctx := testCtx(t)
	w, hs, reg := newWriter(t, store.WriterConfig{FlushInterval: 5 * time.Millisecond})
	hs.failTasks, hs.failOuts = 3, 2

	w.AddTask(rec("t-1"))
	w.AddOutcome(store.Outcome{NodeID: "n1", Success: true, ElapsedMs: 7})
	wait(t, hs.taskBatches, "the task batch to be written after 3 failures")
	wait(t, hs.outBatches, "the outcome batch to be written after 2 failures")
	// Flush waits for the loop's round to finish (flushes take turns), so
	// the metrics below are complete.
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := hs.Store.Task(ctx, "t-1"); err != nil {
		t.Errorf("record not written after retries: %v", err)
	}
	m, err := hs.Store.NodeStats(ctx, []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	if s := m["n1"]; s.TotalTasks != 1 || s.TotalMs != 7 {
		t.Errorf("n1 = %+v, want the outcome applied once", s)
	}
	if got := metric(t, reg, "switchyard_store_flush_errors_total"); got != 5 {
		t.Errorf("flush_errors_total = %v, want 5", got)
	}
	if got := metric(t, reg, "switchyard_store_batch_lag_seconds"); got != 1 {
		t.Errorf("batch_lag_seconds has %v samples, want 1 (one record committed)", got)
	}
	if got := metric(t, reg, "switchyard_store_flush_duration_seconds"); got < 7 {
		t.Errorf("flush_duration_seconds has %v samples, want at least 7 (5 failed, 2 good)", got)
	}
	if st := w.Stats(); st.Dropped != 0 {
		t.Errorf("retried items were dropped: %+v", st)
	}
}

func TestWriterFlushErrorKeepsItems(t *testing.T) {
	ctx := testCtx(t)
	w, hs, _ := newWriter(t, store.WriterConfig{FlushInterval: time.Hour})
	hs.failTasks = 1
	w.AddTask(rec("t-1"))
	if err := w.Flush(ctx); !errors.Is(err, errBoom) {
		t.Fatalf("Flush = %v, want the store's error", err)
	}
	if st := w.Stats(); st.PendingTasks != 1 {
		t.Errorf("after a failed Flush: %+v, want the record kept", st)
	}
	if _, ok := w.LookupTask("t-1"); !ok {
		t.Error("a record whose write failed is no longer found")
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("second Flush: %v", err)
	}
	if _, err := hs.Store.Task(ctx, "t-1"); err != nil {
		t.Errorf("record not written by the second Flush: %v", err)
	}
}

func TestWriterStopFlushes(t *testing.T) {
	ctx := testCtx(t)
	hs := newHookStore(t, openSQLite(t))
	w := store.NewWriter(hs, store.WriterConfig{FlushInterval: time.Hour, Logger: quiet})
	// Taken before Run, and written by it.
	for i := range 3 {
		w.AddTask(rec(fmt.Sprintf("t-%d", i)))
	}
	stop := runWriter(t, w)
	w.AddOutcome(store.Outcome{NodeID: "n1", Success: true})
	w.AddOutcome(store.Outcome{NodeID: "n1", Success: false})

	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i := range 3 {
		if _, err := hs.Store.Task(ctx, fmt.Sprintf("t-%d", i)); err != nil {
			t.Errorf("t-%d not written when Run stopped: %v", i, err)
		}
	}
	m, _ := hs.Store.NodeStats(ctx, []string{"n1"})
	if m["n1"].TotalTasks != 2 {
		t.Errorf("n1 = %+v, want 2 outcomes written when Run stopped", m["n1"])
	}
	w.AddTask(rec("t-late"))
	if st := w.Stats(); st.PendingTasks != 0 || st.Dropped != 1 {
		t.Errorf("AddTask after Run: %+v, want it dropped and counted", st)
	}
}

// The final flush gives up at FinalFlushTimeout, the write under way when
// Run's context ended included (the store here never answers until the
// test lets it), and says what it left; those items stay buffered.
func TestWriterStopGivesUpWithinItsBudget(t *testing.T) {
	hs := newHookStore(t, openSQLite(t))
	hs.failAll = true
	w := store.NewWriter(hs, store.WriterConfig{FlushInterval: time.Millisecond, FinalFlushTimeout: 100 * time.Millisecond, Logger: quiet})
	w.AddTask(rec("t-1"))
	stop := runWriter(t, w)
	wait(t, hs.tasksEntered, "a first failed write")

	start := time.Now()
	err := stop()
	if err == nil || !strings.Contains(err.Error(), "1 task records") || !errors.Is(err, errBoom) {
		t.Fatalf("Run against a failing store = %v, want an error naming 1 unwritten record", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %v to give up; its budget is 100ms", d)
	}
	if st := w.Stats(); st.PendingTasks != 1 {
		t.Errorf("after Run gave up: %+v, want the record still buffered", st)
	}
	// The database is back: a Flush writes it.
	hs.setFailAll(false)
	if err := w.Flush(testCtx(t)); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if _, err := hs.Store.Task(testCtx(t), "t-1"); err != nil {
		t.Errorf("record not written by the Flush: %v", err)
	}
}

// NewWriter starts nothing; Run's goroutines are gone once it returns
// (goleak, in TestMain, checks every test for the rest).
func TestWriterNewStartsNothing(t *testing.T) {
	st := openSQLite(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	w := store.NewWriter(st, store.WriterConfig{Logger: quiet})
	w.AddTask(rec("t-1"))
	if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
		t.Fatalf("NewWriter started a goroutine: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Rating right after a task finishes works although its record is still
// buffered.
func TestWriterRateBufferedTask(t *testing.T) {
	ctx := testCtx(t)
	w, hs, _ := newWriter(t, store.WriterConfig{FlushInterval: time.Hour})
	a, _, err := hs.CreateAccount(ctx, "rater", "", "")
	if err != nil {
		t.Fatal(err)
	}
	r := rec("t-1")
	r.AccountID = a.ID
	w.AddTask(r)
	nodes, err := w.Rate(ctx, "t-1", a.ID, 5, time.Now())
	if err != nil || len(nodes) != 1 || nodes[0] != "n1" {
		t.Fatalf("Rate of a buffered task = %v, %v", nodes, err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after the record was written early: %v", err)
	}
	if _, err := w.Rate(ctx, "t-1", a.ID, 5, time.Now()); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second Rate = %v, want ErrConflict", err)
	}
	if _, err := w.Rate(ctx, "t-unknown", a.ID, 5, time.Now()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Rate(unknown) = %v, want ErrNotFound", err)
	}
}
