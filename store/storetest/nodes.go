package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

func nodeStats(t *testing.T, st store.Store, id string) store.NodeStats {
	t.Helper()
	m, err := st.NodeStats(ctx(t), []string{id})
	noErr(t, err, "NodeStats")
	s, ok := m[id]
	if !ok {
		t.Fatalf("NodeStats has no %s", id)
	}
	return s
}

func testRecordNode(t *testing.T, st store.Store) {
	c := ctx(t)
	noErr(t, st.RecordNode(c, "n1", "acct-1", "alpha"), "RecordNode")
	s := nodeStats(t, st, "n1")
	want := store.NodeStats{NodeID: "n1", AccountID: "acct-1", Name: "alpha"}
	if !sameStats(s, want) {
		t.Errorf("after RecordNode: %+v, want %+v", s, want)
	}
	// Counters survive a re-registration that renames the node.
	noErr(t, st.ApplyOutcomes(c, []store.Outcome{{NodeID: "n1", Success: true, ElapsedMs: 100, At: time.Now()}}), "ApplyOutcomes")
	noErr(t, st.RecordNode(c, "n1", "acct-1", "alpha-2"), "RecordNode again")
	s = nodeStats(t, st, "n1")
	if s.Name != "alpha-2" || s.TotalTasks != 1 || s.SuccessfulTasks != 1 || s.TotalMs != 100 {
		t.Errorf("after a second RecordNode: %+v", s)
	}
	isErr(t, st.RecordNode(c, "", "acct", "x"), store.ErrInvalid, "RecordNode(\"\")")
}

func testApplyOutcomes(t *testing.T, st store.Store) {
	c := ctx(t)
	t0 := time.Now().Add(-time.Hour)
	noErr(t, st.RecordNode(c, "n1", "acct", "one"), "RecordNode")
	noErr(t, st.ApplyOutcomes(c, []store.Outcome{
		{NodeID: "n1", Success: true, ElapsedMs: 100, At: t0},
		{NodeID: "n2", Success: false, ElapsedMs: 60000, At: t0.Add(time.Minute)},
		{NodeID: "n1", Success: false, ElapsedMs: 300, At: t0.Add(2 * time.Minute)},
	}), "ApplyOutcomes 1")
	noErr(t, st.ApplyOutcomes(c, []store.Outcome{
		// Older than what n1 has: counts, but does not move LastTaskAt back.
		{NodeID: "n1", Success: true, ElapsedMs: 600, At: t0.Add(-time.Minute)},
		{NodeID: "n2", Success: true, ElapsedMs: 40, At: t0.Add(3 * time.Minute)},
	}), "ApplyOutcomes 2")
	noErr(t, st.ApplyOutcomes(c, nil), "ApplyOutcomes(nil)")

	want := map[string]store.NodeStats{
		"n1": {NodeID: "n1", AccountID: "acct", Name: "one", TotalTasks: 3, SuccessfulTasks: 2, TotalMs: 1000,
			LastTaskAt: ptr(norm(t0.Add(2 * time.Minute)))},
		// A node the store had not seen is created by its first outcome.
		"n2": {NodeID: "n2", TotalTasks: 2, SuccessfulTasks: 1, TotalMs: 60040, LastTaskAt: ptr(norm(t0.Add(3 * time.Minute)))},
	}
	got, err := st.NodeStats(c, []string{"n1", "n2"})
	noErr(t, err, "NodeStats")
	for id, w := range want {
		if !sameStats(got[id], w) {
			t.Errorf("%s: %+v, want %+v", id, got[id], w)
		}
	}
	all, err := st.AllNodeStats(c)
	noErr(t, err, "AllNodeStats")
	if len(all) != 2 || all[0].NodeID != "n1" || all[1].NodeID != "n2" || !sameStats(all[0], want["n1"]) {
		t.Errorf("AllNodeStats = %+v, want n1 and n2 in that order", all)
	}
}

func testApplyOutcomesInvalid(t *testing.T, st store.Store) {
	c := ctx(t)
	err := st.ApplyOutcomes(c, []store.Outcome{{NodeID: "n1", Success: true, At: time.Now()}, {Success: true}})
	isErr(t, err, store.ErrInvalid, "ApplyOutcomes with an empty node id")
	m, err := st.NodeStats(c, []string{"n1"})
	noErr(t, err, "NodeStats")
	if len(m) != 0 {
		t.Errorf("a refused batch was partly applied: %+v", m)
	}
}

func testNodeStatsSelection(t *testing.T, st store.Store) {
	c := ctx(t)
	nodes := ids("node", 700) // more than one SQLite IN-list chunk
	var outs []store.Outcome
	for i, id := range nodes {
		outs = append(outs, store.Outcome{NodeID: id, Success: i%2 == 0, ElapsedMs: int64(i), At: time.Now()})
	}
	noErr(t, st.ApplyOutcomes(c, outs), "ApplyOutcomes")

	m, err := st.NodeStats(c, append(slices.Clone(nodes), "unknown", nodes[0]))
	noErr(t, err, "NodeStats")
	if len(m) != len(nodes) {
		t.Fatalf("NodeStats returned %d nodes, want %d (unknown ones absent)", len(m), len(nodes))
	}
	if _, ok := m["unknown"]; ok {
		t.Error("NodeStats returned an unknown node")
	}
	if s := m[nodes[699]]; s.TotalMs != 699 || s.TotalTasks != 1 || s.SuccessfulTasks != 0 {
		t.Errorf("%s = %+v", nodes[699], s)
	}
	m, err = st.NodeStats(c, nil)
	noErr(t, err, "NodeStats(nil)")
	if len(m) != 0 {
		t.Errorf("NodeStats(nil) = %d nodes", len(m))
	}
}

func testAllNodeStatsHidesDeleted(t *testing.T, st store.Store) {
	c := ctx(t)
	gone, _ := newAccount(t, st, "gone")
	kept, _ := newAccount(t, st, "kept")
	noErr(t, st.RecordNode(c, "n-gone", gone.ID, "g"), "RecordNode")
	noErr(t, st.RecordNode(c, "n-kept", kept.ID, "k"), "RecordNode")
	noErr(t, st.ApplyOutcomes(c, []store.Outcome{{NodeID: "n-anon", Success: true, At: time.Now()}}), "ApplyOutcomes")
	noErr(t, st.DeleteAccount(c, gone.ID), "DeleteAccount")

	all, err := st.AllNodeStats(c)
	noErr(t, err, "AllNodeStats")
	var names []string
	for _, s := range all {
		names = append(names, s.NodeID)
	}
	if !slices.Equal(names, []string{"n-anon", "n-kept"}) {
		t.Errorf("AllNodeStats = %v, want [n-anon n-kept] (a deleted account's nodes leave the leaderboard)", names)
	}
	// The counters themselves are kept (history), reachable by id.
	nodeStats(t, st, "n-gone")
}

func testSuspend(t *testing.T, st store.Store) {
	c := ctx(t)
	until := time.Now().Add(24 * time.Hour)
	noErr(t, st.RecordNode(c, "n1", "acct", "one"), "RecordNode")
	noErr(t, st.Suspend(c, "n1", until), "Suspend")
	s := nodeStats(t, st, "n1")
	if s.SuspendedUntil == nil || !s.SuspendedUntil.Equal(norm(until)) || s.Name != "one" {
		t.Errorf("after Suspend: %+v, want suspended until %v", s, norm(until))
	}
	// A later call replaces the time (it is not a maximum).
	sooner := until.Add(-time.Hour)
	noErr(t, st.Suspend(c, "n1", sooner), "Suspend again")
	if s := nodeStats(t, st, "n1"); s.SuspendedUntil == nil || !s.SuspendedUntil.Equal(norm(sooner)) {
		t.Errorf("after a second Suspend: %v, want %v", s.SuspendedUntil, norm(sooner))
	}
	// An unknown node gets a row.
	noErr(t, st.Suspend(c, "n2", until), "Suspend(unknown)")
	if s := nodeStats(t, st, "n2"); s.SuspendedUntil == nil || s.TotalTasks != 0 {
		t.Errorf("unknown node after Suspend: %+v", s)
	}
	isErr(t, st.Suspend(c, "", until), store.ErrInvalid, "Suspend(\"\")")
}

func ptr[T any](v T) *T { return &v }

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func sameStats(a, b store.NodeStats) bool {
	ta, tb := a, b
	ta.LastTaskAt, ta.SuspendedUntil, tb.LastTaskAt, tb.SuspendedUntil = nil, nil, nil, nil
	return ta == tb && sameTime(a.LastTaskAt, b.LastTaskAt) && sameTime(a.SuspendedUntil, b.SuspendedUntil)
}

func testBenchmarks(t *testing.T, st store.Store) {
	ctx := context.Background()
	if _, _, err := st.Benchmark(ctx, "n1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Benchmark of a node without one = %v, want ErrNotFound", err)
	}
	at := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
	if err := st.SaveBenchmark(ctx, "n1", []byte(`{"avg_response_ms": 12.5, "benchmark_passed": true}`), at); err != nil {
		t.Fatal(err)
	}
	later := at.Add(time.Hour)
	if err := st.SaveBenchmark(ctx, "n1", []byte(`{"avg_response_ms":40,"benchmark_passed":false}`), later); err != nil {
		t.Fatal(err)
	}
	profile, got, err := st.Benchmark(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(profile, &p); err != nil || p["avg_response_ms"] != 40.0 || p["benchmark_passed"] != false {
		t.Fatalf("profile %s (%v): want the latest one", profile, err)
	}
	if !got.Equal(later) {
		t.Fatalf("measured at %s, want %s", got, later)
	}
	for _, bad := range [][]byte{nil, []byte("{"), []byte("not json")} {
		if err := st.SaveBenchmark(ctx, "n2", bad, at); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SaveBenchmark(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := st.SaveBenchmark(ctx, "", []byte(`{}`), at); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("SaveBenchmark with no node id = %v, want ErrInvalid", err)
	}
}
