package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

// fullRecord has every field set, with times that carry nanoseconds.
func fullRecord(id, account string, finished time.Time) store.TaskRecord {
	return store.TaskRecord{
		ID:           id,
		AccountID:    account,
		KeyID:        "key_0123456789ab",
		TaskType:     "chat",
		Stream:       true,
		Status:       store.StatusCompleted,
		ErrorCode:    "",
		NodeIDs:      []string{"node-b", "node-a"},
		Requester:    "inst-req",
		Owner:        "inst-own",
		Attempts:     2,
		Retries:      []store.Retry{{NodeID: "node-c", Reason: "node_disconnected", LostMs: 512}},
		CreatedAt:    finished.Add(-3*time.Second - 123456789),
		AssignedAt:   finished.Add(-2*time.Second - 987654321),
		FinishedAt:   finished,
		ProcessingMs: 1834,
		ContentBytes: 12345,
		ResultBytes:  67890,
		Usage:        store.Usage{PromptTokens: 11, CompletionTokens: 22},
	}
}

// normRecord is what a store returns for r.
func normRecord(r store.TaskRecord) store.TaskRecord {
	r.CreatedAt, r.FinishedAt = norm(r.CreatedAt), norm(r.FinishedAt)
	if !r.AssignedAt.IsZero() {
		r.AssignedAt = norm(r.AssignedAt)
	}
	if r.NodeIDs == nil {
		r.NodeIDs = []string{}
	}
	return r
}

func sameRecord(t *testing.T, got, want store.TaskRecord) {
	t.Helper()
	want = normRecord(want)
	times := [][2]time.Time{{got.CreatedAt, want.CreatedAt}, {got.AssignedAt, want.AssignedAt}, {got.FinishedAt, want.FinishedAt}}
	for i, p := range times {
		if !p[0].Equal(p[1]) || p[0].Location() != time.UTC {
			t.Errorf("time %d = %v, want %v in UTC", i, p[0], p[1])
		}
	}
	got.CreatedAt, got.AssignedAt, got.FinishedAt = time.Time{}, time.Time{}, time.Time{}
	want.CreatedAt, want.AssignedAt, want.FinishedAt = time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("task record:\n got  %+v\n want %+v", got, want)
	}
}

func testWriteTasksRoundTrip(t *testing.T, st store.Store) {
	c := ctx(t)
	now := time.Now()
	full := fullRecord("t-full", "acct-1", now)
	bare := store.TaskRecord{ // never assigned: no nodes, no AssignedAt
		ID: "t-bare", AccountID: "acct-1", TaskType: "embed", Status: store.StatusError,
		ErrorCode: "timeout", CreatedAt: now.Add(-time.Minute), FinishedAt: now,
	}
	noErr(t, st.WriteTasks(c, []store.TaskRecord{full, bare}), "WriteTasks")

	got, err := st.Task(c, "t-full")
	noErr(t, err, "Task(full)")
	sameRecord(t, got, full)
	got, err = st.Task(c, "t-bare")
	noErr(t, err, "Task(bare)")
	sameRecord(t, got, bare)
	if got.NodeIDs == nil || !got.AssignedAt.IsZero() {
		t.Errorf("bare record: NodeIDs %#v (want empty, not nil), AssignedAt %v (want zero)", got.NodeIDs, got.AssignedAt)
	}

	_, err = st.Task(c, "t-unknown")
	isErr(t, err, store.ErrNotFound, "Task(unknown)")
	noErr(t, st.WriteTasks(c, nil), "WriteTasks(nil)")
}

func testWriteTasksIdempotent(t *testing.T, st store.Store) {
	c := ctx(t)
	now := time.Now()
	first := fullRecord("t-1", "acct", now)
	noErr(t, st.WriteTasks(c, []store.TaskRecord{first}), "WriteTasks first")

	second := first
	second.Status, second.ErrorCode = store.StatusError, "timeout"
	other := fullRecord("t-2", "acct", now)
	// The same id again, in a batch with a new record and a duplicate inside
	// the batch: no error, the first copy is kept, the new one is written.
	noErr(t, st.WriteTasks(c, []store.TaskRecord{second, other, other}), "WriteTasks again")
	noErr(t, st.WriteTasks(c, []store.TaskRecord{first, other}), "the same batch again")

	got, err := st.Task(c, "t-1")
	noErr(t, err, "Task")
	sameRecord(t, got, first)
	got, err = st.Task(c, "t-2")
	noErr(t, err, "Task(t-2)")
	sameRecord(t, got, other)
	n, err := st.CountCompletedSince(c, now.Add(-time.Hour))
	noErr(t, err, "CountCompletedSince")
	if n != 2 {
		t.Errorf("%d completed tasks stored, want 2 (duplicates must not be stored twice)", n)
	}
}

func testWriteTasksInvalid(t *testing.T, st store.Store) {
	c := ctx(t)
	good := fullRecord("t-good", "acct", time.Now())
	err := st.WriteTasks(c, []store.TaskRecord{good, {AccountID: "acct"}})
	isErr(t, err, store.ErrInvalid, "WriteTasks with a record without id")
	// One transaction: nothing of the batch was written.
	_, err = st.Task(c, "t-good")
	isErr(t, err, store.ErrNotFound, "Task of a refused batch")
}

// A NUL byte or invalid UTF-8 (possible in a client's task_type) must not
// make a record unwritable, or it would hold up the writer for good.
func testWriteTasksCleansText(t *testing.T, st store.Store) {
	c := ctx(t)
	r := fullRecord("t-text", "acct", time.Now())
	r.TaskType = "ch\x00at\xff"
	noErr(t, st.WriteTasks(c, []store.TaskRecord{r}), "WriteTasks")
	got, err := st.Task(c, "t-text")
	noErr(t, err, "Task")
	if got.TaskType != "chat\uFFFD" {
		t.Errorf("TaskType = %q, want %q", got.TaskType, "chat\uFFFD")
	}
}

func testCountCompletedSince(t *testing.T, st store.Store) {
	c := ctx(t)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var recs []store.TaskRecord
	add := func(id, status string, finished time.Time) {
		r := fullRecord(id, "acct", finished)
		r.Status = status
		recs = append(recs, r)
	}
	add("old", store.StatusCompleted, base.Add(-time.Second))
	add("edge", store.StatusCompleted, base) // exactly at t: counted
	add("new1", store.StatusCompleted, base.Add(time.Hour))
	add("new2", store.StatusCompleted, base.Add(2*time.Hour))
	add("failed", store.StatusFailed, base.Add(time.Hour))
	add("error", store.StatusError, base.Add(time.Hour))
	add("canceled", store.StatusCanceled, base.Add(time.Hour))
	noErr(t, st.WriteTasks(c, recs), "WriteTasks")

	for _, tc := range []struct {
		since time.Time
		want  int64
	}{
		{base.Add(-time.Hour), 4},
		{base, 3},
		{base.Add(time.Microsecond), 2},
		{base.Add(90 * time.Minute), 1},
		{base.Add(3 * time.Hour), 0},
		{base.In(time.FixedZone("X", 5*3600)), 3}, // a zone does not change the instant
	} {
		n, err := st.CountCompletedSince(c, tc.since)
		noErr(t, err, "CountCompletedSince")
		if n != tc.want {
			t.Errorf("CountCompletedSince(%v) = %d, want %d", tc.since, n, tc.want)
		}
	}
}

func taskFor(account string, nodes []string, status string, finished time.Time, id string) store.TaskRecord {
	r := fullRecord(id, account, finished)
	r.NodeIDs, r.Status = nodes, status
	if len(nodes) == 0 {
		r.AssignedAt = time.Time{}
	}
	return r
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}
