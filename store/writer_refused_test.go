package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/store"
)

// Invariant 17: no record blocks the others. A record the store refuses is
// set aside (the dead_letters table, a metric, one log line) and every
// other record is still written, in the same flush and on the final one.

// refusingStore is a database the writer runs on, and what its refusal of a
// record with a 9,000-character task type or node id says.
type refusingStore struct {
	name    string
	open    func(t *testing.T) store.Store
	refusal string
}

// refusingStores are both databases. PostgreSQL refuses such a record by
// itself: the task type is part of usage_daily's key (and the node id of
// node_stats'), and an index row holds 8191 bytes at most (SQLSTATE 54000,
// program_limit_exceeded). SQLite accepts every record the writer sends (no
// limit below a gigabyte on a string, no CHECK on these tables; an integer
// sum that overflows becomes a REAL), so its schema is given triggers that
// refuse the same records: a real SQLite refusal
// (SQLITE_CONSTRAINT_TRIGGER, what a CHECK constraint would give).
func refusingStores() []refusingStore {
	return []refusingStore{
		{"sqlite", openRefusingSQLite, "over 8191 bytes"},
		{"postgres", openPostgres, "SQLSTATE 54000"},
	}
}

func openRefusingSQLite(t *testing.T) store.Store {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(testCtx(t), store.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatalf("Open SQLite: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("sqlite", filepath.Join(dir, "switchyard.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for table, col := range map[string]string{"tasks": "task_type", "usage_reports": "task_type", "node_stats": "node_id"} {
		if _, err := db.Exec(fmt.Sprintf(`CREATE TRIGGER refuse_long_%[1]s BEFORE INSERT ON %[1]s
			WHEN length(NEW.%[2]s) > 8191 BEGIN SELECT RAISE(ABORT, '%[2]s over 8191 bytes'); END`, table, col)); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// poison is 9,000 random letters (what a chat request's model once was).
func poison() string {
	r := rand.New(rand.NewPCG(36, 17))
	b := make([]byte, 9000)
	for i := range b {
		b[i] = 'a' + byte(r.IntN(26))
	}
	return string(b)
}

// addPoisonedBatch queues, in this order, 10 tasks of alice, one of
// mallory whose task type and node id are poison, and 10 of bob: each
// task's record, its node's usage report and its node's outcome, so that
// each of the three queues has the refused record in the middle of one
// batch.
func addPoisonedBatch(w *store.Writer) {
	now := time.Now()
	add := func(id, account, taskType, node string) {
		w.AddTask(store.TaskRecord{ID: id, AccountID: account, KeyID: "key-" + account, TaskType: taskType, Status: store.StatusCompleted,
			NodeIDs: []string{node}, CreatedAt: now.Add(-time.Second), FinishedAt: now, ContentBytes: 3})
		w.AddUsage(store.UsageReport{TaskID: id, NodeID: node, AccountID: account, KeyID: "key-" + account, TaskType: taskType,
			At: now, PromptTokens: 5, CompletionTokens: 7})
		w.AddOutcome(store.Outcome{NodeID: node, Success: true, ElapsedMs: 10, At: now, Account: account})
	}
	for i := range 10 {
		add(fmt.Sprintf("alice-%02d", i), "alice", "chat", "n-alice")
	}
	add("t-poison", "mallory", poison(), poison())
	for i := range 10 {
		add(fmt.Sprintf("bob-%02d", i), "bob", "chat", "n-bob")
	}
}

// checkPoisonedBatch checks that everything addPoisonedBatch queued was
// written but mallory's task, report and outcome, and that those three are
// in dead_letters, counted once and logged once each.
func checkPoisonedBatch(t *testing.T, st store.Store, w *store.Writer, reg *prometheus.Registry, logs *logRecorder, refusal string) {
	t.Helper()
	ctx := testCtx(t)
	for _, who := range []string{"alice", "bob"} {
		for i := range 10 {
			if _, err := st.Task(ctx, fmt.Sprintf("%s-%02d", who, i)); err != nil {
				t.Errorf("%s's task %d, queued with a refused record, was not written: %v", who, i, err)
			}
		}
	}
	if _, err := st.Task(ctx, "t-poison"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Task(t-poison) = %v, want ErrNotFound", err)
	}
	now := time.Now()
	rows, err := st.Usage(ctx, store.UsageQuery{From: now.Add(-time.Hour), To: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	want := store.UsageTotals{Requests: 10, Completed: 10, PromptTokens: 50, CompletionTokens: 70, ContentBytes: 30}
	if len(rows) != 2 || rows[0].AccountID != "alice" || rows[1].AccountID != "bob" ||
		rows[0].UsageTotals != want || rows[1].UsageTotals != want {
		t.Errorf("usage rows = %+v, want alice's and bob's, each %+v", rows, want)
	}
	nodes, err := st.NodeStats(ctx, []string{"n-alice", "n-bob"})
	if err != nil {
		t.Fatal(err)
	}
	if nodes["n-alice"].TotalTasks != 10 || nodes["n-bob"].TotalTasks != 10 {
		t.Errorf("node counters: n-alice %d, n-bob %d tasks; want 10 each", nodes["n-alice"].TotalTasks, nodes["n-bob"].TotalTasks)
	}

	dls, total, err := st.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if total != 3 {
		t.Fatalf("dead_letters holds %d rows (%+v), want 3: mallory's task, usage report and outcome", total, dls)
	}
	prefix := map[string]string{store.KindTask: `{"task_id":"t-poison",`, store.KindUsage: `{"task_id":"t-poison","node_id":"`,
		store.KindOutcome: `{"node_id":"`}
	for _, d := range dls {
		p, ok := prefix[d.Kind]
		if !ok {
			t.Errorf("a dead letter of kind %q, or a second of its kind", d.Kind)
			continue
		}
		delete(prefix, d.Kind)
		if !strings.Contains(d.Error, refusal) || d.AccountID != "mallory" ||
			(d.Kind != store.KindOutcome && d.TaskID != "t-poison") {
			t.Errorf("%s dead letter: task %q, account %q, error %q; want t-poison's, mallory, and the store's refusal (%q)",
				d.Kind, d.TaskID, d.AccountID, d.Error, refusal)
		}
		if !strings.HasPrefix(d.Record, p) || d.RecordBytes <= 9000 || len(d.Record) > store.DeadLetterRecordMax {
			t.Errorf("%s dead letter's record: %d of %d bytes, starting %.40q; want the record's JSON, bounded", d.Kind,
				len(d.Record), d.RecordBytes, d.Record)
		}
	}
	for _, kind := range []string{store.KindTask, store.KindUsage, store.KindOutcome} {
		if got := metric(t, reg, "switchyard_store_dead_letters_total", "kind", kind); got != 1 {
			t.Errorf("dead_letters_total{kind=%s} = %v, want 1", kind, got)
		}
		if got := metric(t, reg, "switchyard_store_dropped_total", "kind", kind); got != 0 {
			t.Errorf("dropped_total{kind=%s} = %v, want 0", kind, got)
		}
	}
	if got := metric(t, reg, "switchyard_store_dead_letter_errors_total"); got != 0 {
		t.Errorf("dead_letter_errors_total = %v, want 0", got)
	}
	warned := logs.find(slog.LevelWarn, "refused a record")
	if len(warned) != 3 {
		t.Errorf("%d warnings of a refused record, want 3 (one a record): %v", len(warned), warned)
	}
	for _, a := range warned {
		if a["kind"] != store.KindOutcome && a["task_id"] != "t-poison" || !strings.Contains(a["err"], refusal) {
			t.Errorf("warning %v does not name t-poison and the store's refusal", a)
		}
	}
	if st := w.Stats(); st.PendingTasks+st.PendingOutcomes+st.PendingUsage != 0 || st.Dropped != 0 || st.DeadLetters != 3 {
		t.Errorf("Stats = %+v, want nothing pending or dropped and 3 dead letters", st)
	}
}

// The bar of invariant 17, on each database: a batch holding a record the
// store refuses — a 9,000-character task type, which on PostgreSQL is too
// big for usage_daily's key — is written in one flush, all but that record,
// which is set aside. The store's old writer retried the whole batch for
// ever, and every later record of every account waited behind it.
func TestWriterSetsAsideARecordTheStoreRefuses(t *testing.T) {
	for _, rs := range refusingStores() {
		t.Run(rs.name, func(t *testing.T) {
			st := rs.open(t)
			logs := newLogRecorder()
			reg := prometheus.NewRegistry()
			w := store.NewWriter(st, store.WriterConfig{FlushInterval: time.Hour, Registerer: reg, Logger: slog.New(logs)})
			stop := runWriter(t, w)
			addPoisonedBatch(w)
			if err := w.Flush(testCtx(t)); err != nil {
				t.Fatalf("Flush = %v; want every record but the refused one written, in this flush", err)
			}
			checkPoisonedBatch(t, st, w, reg, logs, rs.refusal)
			if err := stop(); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

// What is queued when Run's context ends (SIGTERM) is written by the final
// flush with the same isolation: the good records, not none of them.
func TestWriterStopSetsAsideARecordTheStoreRefuses(t *testing.T) {
	for _, rs := range refusingStores() {
		t.Run(rs.name, func(t *testing.T) {
			st := rs.open(t)
			logs := newLogRecorder()
			reg := prometheus.NewRegistry()
			w := store.NewWriter(st, store.WriterConfig{FlushInterval: time.Hour, FinalFlushTimeout: 30 * time.Second,
				Registerer: reg, Logger: slog.New(logs)})
			stop := runWriter(t, w)
			addPoisonedBatch(w)
			if err := stop(); err != nil {
				t.Fatalf("Run = %v; want the final flush to write every record but the refused one", err)
			}
			checkPoisonedBatch(t, st, w, reg, logs, rs.refusal)
		})
	}
}

// Isolating a refused record costs two writes a halving: a batch of n with
// one refused record takes at most 1 + 2·⌈log2 n⌉ writes, and one refused
// record of a batch is written (and refused) alone once.
func TestWriterIsolationCost(t *testing.T) {
	ctx := testCtx(t)
	hs := newHookStore(t, openRefusingSQLite(t))
	w := store.NewWriter(hs, store.WriterConfig{FlushInterval: time.Hour, Logger: quiet})
	for i := range 64 {
		r := rec(fmt.Sprintf("t-%02d", i))
		if i == 37 {
			r.TaskType = poison()
		}
		w.AddTask(r)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := hs.calls(); n > 1+2*6 {
		t.Errorf("%d writes to set aside one record of 64, want at most 13", n)
	}
	if st := w.Stats(); st.PendingTasks != 0 || st.DeadLetters != 1 {
		t.Errorf("Stats = %+v, want nothing pending and 1 dead letter", st)
	}
	for i := range 64 {
		_, err := hs.Store.Task(ctx, fmt.Sprintf("t-%02d", i))
		if (i == 37) != errors.Is(err, store.ErrNotFound) {
			t.Errorf("task %d: %v", i, err)
		}
	}
}

// The store becoming unavailable while a batch is being isolated keeps what
// is not settled yet queued, in order, as any unavailable write does; what
// was written or set aside before it is not written again.
func TestWriterIsolationInterruptedByAnUnavailableStore(t *testing.T) {
	ctx := testCtx(t)
	hs := newHookStore(t, openRefusingSQLite(t))
	reg := prometheus.NewRegistry()
	w := store.NewWriter(hs, store.WriterConfig{FlushInterval: time.Hour, Logger: quiet, Registerer: reg})
	for i := range 8 {
		r := rec(fmt.Sprintf("t-%d", i))
		if i == 1 {
			r.TaskType = poison()
		}
		w.AddTask(r)
	}
	// Calls: the batch of 8 (refused), t-0..3 (refused), t-0..1 (refused),
	// t-0 (written), t-1 (refused: set aside), t-2..3 (written), t-4..7:
	// the store is unavailable from there.
	hs.failTaskCall = 7
	if err := w.Flush(ctx); !errors.Is(err, errBoom) {
		t.Fatalf("Flush = %v, want the unavailable store's error", err)
	}
	if st := w.Stats(); st.PendingTasks != 4 || st.DeadLetters != 1 {
		t.Fatalf("Stats = %+v, want t-4..7 still queued and 1 dead letter", st)
	}
	for i, want := range []bool{true, false, true, true, false, false, false, false} {
		_, err := hs.Store.Task(ctx, fmt.Sprintf("t-%d", i))
		if want != (err == nil) {
			t.Errorf("task %d after the interrupted flush: %v", i, err)
		}
		if _, ok := w.LookupTask(fmt.Sprintf("t-%d", i)); ok != (i >= 4) {
			t.Errorf("LookupTask(t-%d) = %v", i, ok)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.PendingTasks != 0 || st.DeadLetters != 1 {
		t.Errorf("Stats after the store answered again = %+v, want nothing queued, still 1 dead letter", st)
	}
	if _, total, err := hs.DeadLetters(ctx, 10); err != nil || total != 1 {
		t.Errorf("dead_letters holds %d rows (%v), want 1", total, err)
	}
	if got := metric(t, reg, "switchyard_store_batch_lag_seconds"); got != 7 {
		t.Errorf("batch_lag_seconds has %v samples, want 7 (the records committed)", got)
	}
}

// A dead letter that cannot be stored either is counted and logged, and
// dropped: the queue goes on.
func TestWriterDeadLetterThatCannotBeKept(t *testing.T) {
	ctx := testCtx(t)
	hs := newHookStore(t, openRefusingSQLite(t))
	hs.failDeadLetters = 1
	logs := newLogRecorder()
	reg := prometheus.NewRegistry()
	w := store.NewWriter(hs, store.WriterConfig{FlushInterval: time.Hour, Logger: slog.New(logs), Registerer: reg})
	w.AddTask(rec("t-1"))
	bad := rec("t-bad")
	bad.TaskType = poison()
	w.AddTask(bad)
	w.AddTask(rec("t-2"))
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v; a dead letter that cannot be kept must not hold up the queue", err)
	}
	if st := w.Stats(); st.PendingTasks != 0 || st.DeadLetters != 1 {
		t.Errorf("Stats = %+v, want nothing queued and 1 dead letter", st)
	}
	for _, id := range []string{"t-1", "t-2"} {
		if _, err := hs.Store.Task(ctx, id); err != nil {
			t.Errorf("%s not written: %v", id, err)
		}
	}
	if got := metric(t, reg, "switchyard_store_dead_letter_errors_total"); got != 1 {
		t.Errorf("dead_letter_errors_total = %v, want 1", got)
	}
	lost := logs.find(slog.LevelError, "dead_letters either")
	if len(lost) != 1 || lost[0]["task_id"] != "t-bad" || !strings.HasPrefix(lost[0]["record"], `{"task_id":"t-bad"`) {
		t.Errorf("errors logged for the lost dead letter: %v, want one naming t-bad with its record", lost)
	}
}

// The store's own refusal (ErrInvalid) is isolated like the database's: the
// one record is set aside and the rest of its batch written. (It once
// dropped the whole batch.)
func TestWriterIsolatesTheStoresOwnRefusal(t *testing.T) {
	ctx := testCtx(t)
	w, hs, reg := newWriter(t, store.WriterConfig{FlushInterval: time.Hour})
	hs.failTasks, hs.failErr = 1, fmt.Errorf("bad record: %w", store.ErrInvalid)
	w.AddTask(rec("t-1"))
	w.AddTask(rec("t-2"))
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v; a batch that can never be written must not block the ones after it", err)
	}
	// The batch was refused once; its halves were written.
	if st := w.Stats(); st.PendingTasks != 0 || st.Dropped != 0 || st.DeadLetters != 0 {
		t.Errorf("Stats = %+v, want both records written", st)
	}
	for _, id := range []string{"t-1", "t-2"} {
		if _, err := hs.Store.Task(ctx, id); err != nil {
			t.Errorf("%s not written: %v", id, err)
		}
	}
	if got := metric(t, reg, "switchyard_store_dropped_total", "kind", "task"); got != 0 {
		t.Errorf("dropped_total{kind=task} = %v, want 0", got)
	}
}

// A refusal is the store's answer, not its absence: SQLite refusing records
// must not open the breaker (and fail every call for everyone), as it did
// when every SQLite error counted as the store not answering.
func TestGuardRefusalsKeepTheBreakerClosed(t *testing.T) {
	ctx := testCtx(t)
	st := openRefusingSQLite(t)
	bad := rec("t-bad")
	bad.TaskType = poison()
	for i := range 5 {
		if err := st.WriteTasks(ctx, []store.TaskRecord{bad}); err == nil || errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("write %d of a refused record = %v, want the store's refusal, not ErrUnavailable", i, err)
		}
	}
	if _, err := st.Task(ctx, "none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a call after 5 refusals = %v, want an answer (the breaker closed)", err)
	}
}

// logRecorder keeps the records logged through it.
type logRecorder struct {
	mu   *sync.Mutex
	recs *[]slog.Record
}

func newLogRecorder() *logRecorder { return &logRecorder{mu: &sync.Mutex{}, recs: &[]slog.Record{}} }

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.recs = append(*h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}

// find returns the attributes of each record at level whose message
// contains msg.
func (h *logRecorder) find(level slog.Level, msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range *h.recs {
		if r.Level != level || !strings.Contains(r.Message, msg) {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, attrs)
	}
	return out
}
