package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// usageRecord is a finished task of a key and type, with usage figures
// derived from n so that every sum checks every record.
func usageRecord(id, account, key, taskType, status string, finished time.Time, n int64) store.TaskRecord {
	return store.TaskRecord{ID: id, AccountID: account, KeyID: key, TaskType: taskType, Status: status,
		NodeIDs: []string{"n"}, CreatedAt: finished.Add(-time.Second), AssignedAt: finished.Add(-time.Second), FinishedAt: finished,
		ProcessingMs: 10 * n, ContentBytes: 100 * n, ResultBytes: 1000 * n,
		Usage: store.Usage{PromptTokens: n, CompletionTokens: 2 * n}}
}

// reportOf is the usage report of a record's node: its tokens, time and
// result, reported when the task finished.
func reportOf(r store.TaskRecord) store.UsageReport {
	return store.UsageReport{TaskID: r.ID, NodeID: "n", AccountID: r.AccountID, KeyID: r.KeyID, TaskType: r.TaskType,
		At: r.FinishedAt, PromptTokens: r.Usage.PromptTokens, CompletionTokens: r.Usage.CompletionTokens,
		NodeMs: r.ProcessingMs, ResultBytes: r.ResultBytes}
}

func reportsOf(recs []store.TaskRecord) []store.UsageReport {
	out := make([]store.UsageReport, len(recs))
	for i, r := range recs {
		out[i] = reportOf(r)
	}
	return out
}

// wantUsage sums records, and the reports of their nodes (reportOf), the
// way the store must: a row per account, UTC day, key and task type.
func wantUsage(recs []store.TaskRecord) []store.UsageRow {
	var rows []store.UsageRow
	for _, r := range recs {
		t := store.UsageTotals{Requests: 1, PromptTokens: r.Usage.PromptTokens, CompletionTokens: r.Usage.CompletionTokens,
			NodeMs: r.ProcessingMs, ContentBytes: r.ContentBytes, ResultBytes: r.ResultBytes}
		if r.Status == store.StatusCompleted {
			t.Completed = 1
		}
		rows = append(rows, store.UsageRow{AccountID: r.AccountID, Day: r.FinishedAt.UTC().Format(store.DayLayout),
			KeyID: r.KeyID, TaskType: r.TaskType, UsageTotals: t})
	}
	out, _ := store.GroupUsage(rows, []string{store.GroupByAccount, store.GroupByDay, store.GroupByKey, store.GroupByTaskType})
	return out
}

func sameUsage(t *testing.T, what string, got, want []store.UsageRow) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

func testUsage(t *testing.T, st store.Store) {
	c := ctx(t)
	// Two days, the first ending a microsecond before UTC midnight, in a
	// zone other than UTC: the day is the UTC one.
	midnight := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	late := midnight.Add(-time.Microsecond).In(time.FixedZone("east", 5*3600))
	early := midnight.Add(time.Hour)
	recs := []store.TaskRecord{
		usageRecord("u1", "acct-a", "key-1", "chat", store.StatusCompleted, late, 1),
		usageRecord("u2", "acct-a", "key-1", "chat", store.StatusCompleted, late, 2),
		usageRecord("u3", "acct-a", "key-1", "embed", store.StatusFailed, late, 4),
		usageRecord("u4", "acct-a", "key-2", "chat", store.StatusCompleted, early, 8),
		usageRecord("u5", "acct-a", "key-1", "chat", store.StatusError, early, 16),
		usageRecord("u6", "acct-b", "key-3", "chat", store.StatusCanceled, early, 32),
		usageRecord("u7", "acct-b", "key-3", "chat", store.StatusCompleted, early.Add(48*time.Hour), 64),
	}
	noErr(t, st.WriteTasks(c, recs[:3]), "WriteTasks")
	noErr(t, st.WriteTasks(c, recs[3:]), "WriteTasks")
	noErr(t, st.WriteUsage(c, reportsOf(recs[:4])), "WriteUsage")
	noErr(t, st.WriteUsage(c, reportsOf(recs[4:])), "WriteUsage")

	day := func(d int) time.Time { return midnight.AddDate(0, 0, d) }
	all, err := st.Usage(c, store.UsageQuery{From: day(-1), To: day(2)})
	noErr(t, err, "Usage")
	sameUsage(t, "every account, both ends of the range included", all, wantUsage(recs))
	if got := all[0]; got.Day != "2026-03-09" || got.Requests != 2 || got.Completed != 2 || got.PromptTokens != 3 || got.CompletionTokens != 6 ||
		got.NodeMs != 30 || got.ContentBytes != 300 || got.ResultBytes != 3000 {
		t.Errorf("first row %+v: want acct-a's two chats of key-1 on 2026-03-09", got)
	}

	a, err := st.Usage(c, store.UsageQuery{AccountID: "acct-a", From: day(-1), To: day(0)})
	noErr(t, err, "Usage(acct-a)")
	sameUsage(t, "one account", a, wantUsage(recs[:5]))

	first, err := st.Usage(c, store.UsageQuery{From: day(-1), To: day(-1).Add(23 * time.Hour)})
	noErr(t, err, "Usage(first day)")
	sameUsage(t, "the first day alone (its time of day ignored)", first, wantUsage(recs[:3]))

	none, err := st.Usage(c, store.UsageQuery{AccountID: "acct-b", From: day(-1), To: day(-1)})
	noErr(t, err, "Usage(none)")
	if none == nil || len(none) != 0 {
		t.Errorf("no usage: got %#v, want an empty, non-nil list", none)
	}
	_, err = st.Usage(c, store.UsageQuery{AccountID: "acct-a"})
	isErr(t, err, store.ErrInvalid, "Usage without days")

	byKey, err := store.GroupUsage(all, []string{store.GroupByKey})
	noErr(t, err, "GroupUsage")
	want := []store.UsageRow{
		{KeyID: "key-1", UsageTotals: store.UsageTotals{Requests: 4, Completed: 2, PromptTokens: 23, CompletionTokens: 46, NodeMs: 230, ContentBytes: 2300, ResultBytes: 23000}},
		{KeyID: "key-2", UsageTotals: store.UsageTotals{Requests: 1, Completed: 1, PromptTokens: 8, CompletionTokens: 16, NodeMs: 80, ContentBytes: 800, ResultBytes: 8000}},
		{KeyID: "key-3", UsageTotals: store.UsageTotals{Requests: 2, Completed: 1, PromptTokens: 96, CompletionTokens: 192, NodeMs: 960, ContentBytes: 9600, ResultBytes: 96000}},
	}
	sameUsage(t, "grouped by key", byKey, want)
	_, err = store.GroupUsage(all, []string{"colour"})
	isErr(t, err, store.ErrInvalid, "GroupUsage by colour")
}

// The writer retries a batch that failed, and two instances may write the
// same task: a task, and a node's report for it, are counted once, however
// often they are written.
func testUsageRetriedBatch(t *testing.T, st store.Store) {
	c := ctx(t)
	now := time.Now()
	var recs []store.TaskRecord
	for i := range 10 {
		recs = append(recs, usageRecord(fmt.Sprintf("r%d", i), "acct", "key", "chat", store.StatusCompleted, now, int64(i+1)))
	}
	noErr(t, st.WriteTasks(c, recs[:6]), "WriteTasks")
	noErr(t, st.WriteTasks(c, recs), "WriteTasks (retried, with more)")
	noErr(t, st.WriteTasks(c, recs[2:4]), "WriteTasks (again)")
	reps := reportsOf(recs)
	noErr(t, st.WriteUsage(c, reps[:6]), "WriteUsage")
	noErr(t, st.WriteUsage(c, reps), "WriteUsage (retried, with more)")
	noErr(t, st.WriteUsage(c, append(reps[2:4:4], reps[3])), "WriteUsage (again, one twice in the batch)")
	got, err := st.Usage(c, store.UsageQuery{From: now, To: now})
	noErr(t, err, "Usage")
	sameUsage(t, "after overlapping batches", got, wantUsage(recs))
}

// Batches written at once, overlapping and touching the same usage rows in
// different orders: every task counted once, no deadlock.
func testConcurrentUsage(t *testing.T, st store.Store) {
	c := ctx(t)
	now := time.Now()
	keys, types := []string{"k1", "k2", "k3"}, []string{"chat", "embed"}
	var all []store.TaskRecord
	errs := parallel(t, func(i int) error {
		var recs []store.TaskRecord
		for j := range 30 {
			k, ty := keys[(i+j)%len(keys)], types[(i*j)%len(types)]
			recs = append(recs, usageRecord(fmt.Sprintf("own-%d-%d", i, j), "acct", k, ty, store.StatusCompleted, now, int64(j)))
		}
		for j := range 10 {
			recs = append(recs, usageRecord(fmt.Sprintf("shared-%d", j), "acct", keys[j%3], "chat", store.StatusCompleted, now, 1))
		}
		if err := st.WriteTasks(c, recs); err != nil {
			return err
		}
		return st.WriteUsage(c, reportsOf(recs))
	})
	for _, err := range errs {
		noErr(t, err, "concurrent WriteTasks and WriteUsage")
	}
	for i := range workers {
		for j := range 30 {
			k, ty := keys[(i+j)%len(keys)], types[(i*j)%len(types)]
			all = append(all, usageRecord(fmt.Sprintf("own-%d-%d", i, j), "acct", k, ty, store.StatusCompleted, now, int64(j)))
		}
	}
	for j := range 10 {
		all = append(all, usageRecord(fmt.Sprintf("shared-%d", j), "acct", keys[j%3], "chat", store.StatusCompleted, now, 1))
	}
	got, err := st.Usage(c, store.UsageQuery{From: now, To: now})
	noErr(t, err, "Usage")
	sameUsage(t, "after concurrent batches", got, wantUsage(all))
}

// A node's report counts whatever became of its task's record: reports of
// tasks whose record never came (their requesting instance died) add their
// tokens, a record without a report (its node never answered) adds its
// request alone, and a task run by two nodes (its first failed) adds both
// nodes' reports, each once.
func testUsageReports(t *testing.T, st store.Store) {
	c := ctx(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	recorded := usageRecord("ur1", "acct", "key", "chat", store.StatusCompleted, now, 1)
	orphan := reportOf(usageRecord("ur2", "acct", "key", "chat", store.StatusCompleted, now, 2))
	silent := usageRecord("ur3", "acct", "key", "chat", store.StatusError, now, 4)
	retried := usageRecord("ur4", "acct", "key", "chat", store.StatusCompleted, now, 8)
	first := reportOf(retried)
	first.NodeID, first.PromptTokens, first.CompletionTokens, first.NodeMs, first.ResultBytes = "m", 100, 0, 1000, 0
	noErr(t, st.WriteTasks(c, []store.TaskRecord{recorded, silent, retried}), "WriteTasks")
	noErr(t, st.WriteUsage(c, []store.UsageReport{reportOf(recorded), orphan, first, reportOf(retried)}), "WriteUsage")
	noErr(t, st.WriteUsage(c, []store.UsageReport{first, orphan}), "WriteUsage (again)")

	got, err := st.Usage(c, store.UsageQuery{From: now, To: now})
	noErr(t, err, "Usage")
	want := []store.UsageRow{{AccountID: "acct", Day: "2026-05-01", KeyID: "key", TaskType: "chat",
		UsageTotals: store.UsageTotals{Requests: 3, Completed: 2,
			PromptTokens: 1 + 2 + 100 + 8, CompletionTokens: 2 + 4 + 16, NodeMs: 10 + 20 + 1000 + 80,
			ContentBytes: 100 + 400 + 800, ResultBytes: 1000 + 2000 + 8000}}}
	sameUsage(t, "records and reports", got, want)

	bad := reportOf(recorded)
	bad.NodeID = ""
	isErr(t, st.WriteUsage(c, []store.UsageReport{orphan, bad}), store.ErrInvalid, "WriteUsage without a node id")
	bad = reportOf(recorded)
	bad.TaskID = ""
	isErr(t, st.WriteUsage(c, []store.UsageReport{bad}), store.ErrInvalid, "WriteUsage without a task id")
	noErr(t, st.WriteUsage(c, nil), "WriteUsage(nil)")
	again, err := st.Usage(c, store.UsageQuery{From: now, To: now})
	noErr(t, err, "Usage")
	sameUsage(t, "after rejected batches", again, want)
}
