package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

func testRate(t *testing.T, st store.Store) {
	c := ctx(t)
	a, _ := newAccount(t, st, "rater")
	now := time.Now()
	noErr(t, st.RecordNode(c, "n-a", "owner", "A"), "RecordNode")
	noErr(t, st.ApplyOutcomes(c, []store.Outcome{{NodeID: "n-a", Success: true, ElapsedMs: 10, At: now}}), "ApplyOutcomes")
	// n-b has no node_stats row yet (its outcome is still in a writer).
	noErr(t, st.WriteTasks(c, []store.TaskRecord{taskFor(a.ID, []string{"n-b", "n-a"}, store.StatusCompleted, now.Add(-10*time.Minute), "t1")}), "WriteTasks")

	nodes, err := st.Rate(c, "t1", a.ID, 4, now)
	noErr(t, err, "Rate")
	if !slices.Equal(nodes, []string{"n-a", "n-b"}) {
		t.Errorf("Rate returned %v, want every node that served the task, [n-a n-b]", nodes)
	}
	m, err := st.NodeStats(c, []string{"n-a", "n-b"})
	noErr(t, err, "NodeStats")
	if s := m["n-a"]; s.RatingSum != 4 || s.RatingCount != 1 || s.TotalTasks != 1 || s.Name != "A" {
		t.Errorf("n-a after rating: %+v", s)
	}
	if s := m["n-b"]; s.RatingSum != 4 || s.RatingCount != 1 {
		t.Errorf("n-b after rating: %+v", s)
	}

	// Once per task (409), and a refused rating changes nothing.
	_, err = st.Rate(c, "t1", a.ID, 5, now)
	isErr(t, err, store.ErrConflict, "rating a task twice")
	if s := nodeStats(t, st, "n-a"); s.RatingSum != 4 || s.RatingCount != 1 {
		t.Errorf("n-a after a refused second rating: %+v", s)
	}

	// Ratings add up over tasks.
	noErr(t, st.WriteTasks(c, []store.TaskRecord{taskFor(a.ID, []string{"n-a"}, store.StatusCompleted, now, "t2")}), "WriteTasks")
	_, err = st.Rate(c, "t2", a.ID, 1, now)
	noErr(t, err, "Rate t2")
	if s := nodeStats(t, st, "n-a"); s.RatingSum != 5 || s.RatingCount != 2 {
		t.Errorf("n-a after two ratings: %+v, want sum 5 count 2", s)
	}
}

func testRateErrors(t *testing.T, st store.Store) {
	c := ctx(t)
	owner, _ := newAccount(t, st, "owner")
	other, _ := newAccount(t, st, "other")
	now := time.Now()
	noErr(t, st.WriteTasks(c, []store.TaskRecord{
		taskFor(owner.ID, []string{"n1"}, store.StatusCompleted, now.Add(-time.Minute), "t-ok"),
		taskFor(owner.ID, nil, store.StatusError, now.Add(-time.Minute), "t-no-node"),
		taskFor(owner.ID, nil, store.StatusCanceled, now.Add(-time.Minute), "t-canceled"),
	}), "WriteTasks")

	for _, tc := range []struct {
		name    string
		task    string
		account string
		rating  int
		want    error
	}{
		{"rating 0", "t-ok", owner.ID, 0, store.ErrInvalid},
		{"rating 6", "t-ok", owner.ID, 6, store.ErrInvalid},
		{"rating -1", "t-ok", owner.ID, -1, store.ErrInvalid},
		{"unknown task", "t-unknown", owner.ID, 3, store.ErrNotFound},
		{"another account", "t-ok", other.ID, 3, store.ErrForbidden},
		{"error before any node", "t-no-node", owner.ID, 3, store.ErrNotFound},
		{"canceled before any node", "t-canceled", owner.ID, 3, store.ErrNotFound},
	} {
		_, err := st.Rate(c, tc.task, tc.account, tc.rating, now)
		isErr(t, err, tc.want, tc.name)
	}
	// None of those touched a counter or used up the rating.
	m, err := st.NodeStats(c, []string{"n1"})
	noErr(t, err, "NodeStats")
	if s, ok := m["n1"]; ok && s.RatingCount != 0 {
		t.Errorf("refused ratings were counted: %+v", s)
	}
	_, err = st.Rate(c, "t-ok", owner.ID, 3, now)
	noErr(t, err, "the owner's valid rating after refused ones")
}

func testRateWindow(t *testing.T, st store.Store) {
	c := ctx(t)
	a, _ := newAccount(t, st, "late")
	finished := time.Now().Add(-2 * time.Hour)
	noErr(t, st.WriteTasks(c, []store.TaskRecord{
		taskFor(a.ID, []string{"n1"}, store.StatusCompleted, finished, "t-late"),
		taskFor(a.ID, []string{"n1"}, store.StatusCompleted, finished, "t-edge"),
	}), "WriteTasks")

	_, err := st.Rate(c, "t-late", a.ID, 5, finished.Add(store.RatingWindow+time.Millisecond))
	isErr(t, err, store.ErrExpired, "rating after the window")
	_, err = st.Rate(c, "t-late", a.ID, 5, finished.Add(2*store.RatingWindow))
	isErr(t, err, store.ErrExpired, "rating long after the window")
	// Exactly at the end of the window is still inside it.
	_, err = st.Rate(c, "t-edge", a.ID, 5, norm(finished).Add(store.RatingWindow))
	noErr(t, err, "rating at the end of the window")
}

func testRateAnyStatus(t *testing.T, st store.Store) {
	c := ctx(t)
	a, _ := newAccount(t, st, "any")
	now := time.Now()
	var recs []store.TaskRecord
	for _, status := range []string{store.StatusFailed, store.StatusError, store.StatusCanceled} {
		r := taskFor(a.ID, []string{"n1"}, status, now, status)
		if status == store.StatusError {
			r.ErrorCode = "node_disconnected"
		}
		recs = append(recs, r)
	}
	noErr(t, st.WriteTasks(c, recs), "WriteTasks")
	for _, r := range recs {
		nodes, err := st.Rate(c, r.ID, a.ID, 2, now)
		noErr(t, err, "Rate a "+r.Status+" task that a node served")
		if !slices.Equal(nodes, []string{"n1"}) {
			t.Errorf("Rate(%s) = %v", r.ID, nodes)
		}
	}
	if s := nodeStats(t, st, "n1"); s.RatingCount != 3 || s.RatingSum != 6 {
		t.Errorf("n1 = %+v, want 3 ratings summing to 6", s)
	}
}
