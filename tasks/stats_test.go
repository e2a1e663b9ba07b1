package tasks

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The quantiles of a known spread of latencies land within a bucket's
// width (about 19 %) of the true ones.
func TestStatsQuantiles(t *testing.T) {
	s := newStats("i1")
	now := time.Unix(1_700_000_000, 0)
	for ms := 1; ms <= 1000; ms++ {
		s.add("echo", now, time.Duration(ms)*time.Millisecond, "", "n1", "")
	}
	ts := s.snapshot(now).Types["echo"]
	if got := ts.Latency.Count(); got != 1000 {
		t.Fatalf("count %d, want 1000", got)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 500}, {0.95, 950}, {0.99, 990}} {
		if got := ts.Latency.Quantile(c.q); math.Abs(got-c.want)/c.want > 0.1 {
			t.Errorf("p%v = %.1f ms, want about %v", c.q*100, got, c.want)
		}
	}
	if got := (Histogram{}).Quantile(0.5); got != 0 {
		t.Errorf("an empty histogram's median is %v, want 0", got)
	}
	// Sub-millisecond and very long latencies land in the end buckets.
	if latencyBucket(0) != 0 || latencyBucket(time.Hour) != LatencyBuckets-1 {
		t.Errorf("end buckets: %d %d", latencyBucket(0), latencyBucket(time.Hour))
	}
}

// The series has one slot per 10 s, oldest first; what is older than five
// minutes leaves the window and its histogram, and a type with nothing
// left drops out.
func TestStatsWindowAndExpiry(t *testing.T) {
	s := newStats("i1")
	t0 := time.Unix(1_700_000_000, 0) // a slot boundary
	s.add("echo", t0, 100*time.Millisecond, "", "n1", "")
	s.add("echo", t0.Add(10*time.Second), 200*time.Millisecond, "timeout", "n1", "no result in time")
	s.add("echo", t0.Add(12*time.Second), 300*time.Millisecond, "", "n1", "")

	snap := s.snapshot(t0.Add(15 * time.Second))
	ts := snap.Types["echo"]
	if len(ts.Finished) != StatsSlots || len(ts.Failed) != StatsSlots {
		t.Fatalf("series lengths %d/%d, want %d", len(ts.Finished), len(ts.Failed), StatsSlots)
	}
	if ts.Finished[StatsSlots-1] != 2 || ts.Finished[StatsSlots-2] != 1 || ts.Failed[StatsSlots-1] != 1 || ts.Failed[StatsSlots-2] != 0 {
		t.Fatalf("last slots: finished %v failed %v", ts.Finished[StatsSlots-2:], ts.Failed[StatsSlots-2:])
	}
	if len(snap.Failures) != 1 || snap.Failures[0].Code != "timeout" || snap.Failures[0].NodeID != "n1" || snap.Failures[0].Instance != "i1" {
		t.Fatalf("failures %+v", snap.Failures)
	}

	// 4 min 55 s after the first: the first slot has just left the window.
	ts = s.snapshot(t0.Add(300 * time.Second)).Types["echo"]
	if got := ts.Latency.Count(); got != 2 {
		t.Fatalf("after the first slot left the window: %d latencies, want 2", got)
	}
	if ts.Finished[0] != 2 {
		t.Fatalf("the oldest slot holds %d, want 2 (%v)", ts.Finished[0], ts.Finished)
	}

	// Past five minutes of everything: the type is gone, the failure stays
	// (for an hour).
	snap = s.snapshot(t0.Add(311 * time.Second))
	if _, ok := snap.Types["echo"]; ok || len(snap.Failures) != 1 {
		t.Fatalf("after the window: types %v, failures %d", snap.Types, len(snap.Failures))
	}
	snap = s.snapshot(t0.Add(2 * time.Hour))
	if !snap.Empty() {
		t.Fatalf("two hours on: %+v, want empty", snap)
	}

	// A ring slot reused after a lap counts afresh.
	s.add("echo", t0.Add(StatsSlots*StatsSlot), time.Millisecond, "", "", "")
	if got := s.snapshot(t0.Add(StatsSlots * StatsSlot)).Types["echo"].Latency.Count(); got != 1 {
		t.Fatalf("a reused slot counts %d, want 1", got)
	}
}

// The failures kept are the newest MaxFailures, newest first; messages
// are bounded; task types beyond the bound are not counted, but their
// failures are.
func TestStatsBounds(t *testing.T) {
	s := newStats("i1")
	now := time.Unix(1_700_000_000, 0)
	long := string(make([]rune, 1000))
	for i := range MaxFailures + 5 {
		s.add("echo", now.Add(time.Duration(i)*time.Millisecond), time.Millisecond, "timeout", fmt.Sprint("n", i), long)
	}
	snap := s.snapshot(now.Add(time.Second))
	if len(snap.Failures) != MaxFailures || snap.Failures[0].NodeID != fmt.Sprint("n", MaxFailures+4) {
		t.Fatalf("%d failures, newest %+v", len(snap.Failures), snap.Failures[0])
	}
	if n := len([]rune(snap.Failures[0].Message)); n > maxFailureMessage {
		t.Fatalf("message of %d runes", n)
	}
	for i := range maxStatsTypes + 10 {
		s.add(fmt.Sprint("t", i), now, time.Millisecond, "", "", "")
	}
	if got := len(s.snapshot(now).Types); got != maxStatsTypes {
		t.Fatalf("%d types kept, want %d", got, maxStatsTypes)
	}
}

// Merging adds the series slot by slot, aligned on the newest instance's
// slot, and the histograms bucket by bucket: the merged p95 is that of
// every request together, not the average of the instances' p95s.
func TestMergeStats(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	a, b := newStats("a"), newStats("b")
	for range 95 {
		a.add("echo", now, 10*time.Millisecond, "", "na", "")
	}
	for range 5 {
		b.add("echo", now.Add(-10*time.Second), time.Second, "node_disconnected", "nb", "")
	}
	b.add("other", now.Add(-10*time.Second), time.Millisecond, "", "nb", "")
	// b published a slot earlier than a.
	m := MergeStats(a.snapshot(now), b.snapshot(now.Add(-5*time.Second)))
	if m.Slot != slotOf(now) {
		t.Fatalf("slot %d, want %d", m.Slot, slotOf(now))
	}
	echo := m.Types["echo"]
	if echo.Finished[StatsSlots-1] != 95 || echo.Finished[StatsSlots-2] != 5 || echo.Failed[StatsSlots-2] != 5 {
		t.Fatalf("aligned series: finished %v failed %v", echo.Finished[StatsSlots-3:], echo.Failed[StatsSlots-3:])
	}
	if got := echo.Latency.Count(); got != 100 {
		t.Fatalf("merged count %d", got)
	}
	// 95 of 100 at 10 ms: the p50 is about 10 ms and the p95 too; the
	// p99 is about a second. Averaging a's p95 (10) and b's (1000) would
	// say 505.
	if p := echo.Latency.Quantile(0.5); p < 8 || p > 12 {
		t.Errorf("merged p50 %.1f, want about 10", p)
	}
	if p := echo.Latency.Quantile(0.95); p < 8 || p > 12 {
		t.Errorf("merged p95 %.1f, want about 10", p)
	}
	if p := echo.Latency.Quantile(0.99); p < 800 || p > 1100 {
		t.Errorf("merged p99 %.1f, want about 1000", p)
	}
	if _, ok := m.Types["other"]; !ok {
		t.Fatal("a type only one instance has is missing")
	}
	if len(m.Failures) != 5 || m.Failures[0].Instance != "b" {
		t.Fatalf("failures %+v", m.Failures)
	}
	// A snapshot a whole window behind adds nothing to the series.
	old := MergeStats(a.snapshot(now), StatsSnapshot{Slot: slotOf(now) - StatsSlots, Types: map[string]TypeStats{
		"echo": {Finished: make([]int, StatsSlots), Failed: make([]int, StatsSlots)}}})
	if old.Types["echo"].Finished[StatsSlots-1] != 95 {
		t.Fatalf("merge with a stale snapshot: %v", old.Types["echo"].Finished)
	}
	if e := MergeStats(); !e.Empty() {
		t.Fatalf("merge of nothing: %+v", e)
	}
}

// The cost a finished request adds on the requester side.
func BenchmarkStatsAdd(b *testing.B) {
	s := newStats("i1")
	now := time.Now()
	for i := 0; b.Loop(); i++ {
		s.add("echo", now, time.Duration(i%1000)*time.Millisecond, "", "n1", "")
	}
}
