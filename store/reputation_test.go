package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

func TestScore(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	for _, tc := range []struct {
		name string
		s    store.NodeStats
		want float64
	}{
		{"new node", store.NodeStats{}, 50},
		{"new node with a stale rating", store.NodeStats{RatingSum: 1, RatingCount: 1}, 50},
		// 40·1 + 20·(1−0.1) + 20·1 + 20·0.5
		{"all good, unrated", store.NodeStats{TotalTasks: 10, SuccessfulTasks: 10, TotalMs: 10000, LastTaskAt: ago(0)}, 88},
		// 40·0.75 + 20·0.5 + 20·0.5 + 20·(4/5)
		{"mixed, rated", store.NodeStats{TotalTasks: 4, SuccessfulTasks: 3, TotalMs: 20000, LastTaskAt: ago(12 * time.Hour), RatingSum: 8, RatingCount: 2}, 66},
		// 0 + 0 (timeouts count 60 s) + 0 (two days idle) + 20·0.5
		{"timeouts, idle", store.NodeStats{TotalTasks: 10, TotalMs: 600000, LastTaskAt: ago(48 * time.Hour)}, 10},
		// 40/3 + 20 + 20 + 10 = 63.333…
		{"rounds to one decimal", store.NodeStats{TotalTasks: 3, SuccessfulTasks: 1, LastTaskAt: ago(0)}, 63.3},
		// 40·5/7 + 20·(1−0.2345) + 20·0.75 + 20·(3/5) = 70.8814…
		{"every term", store.NodeStats{TotalTasks: 7, SuccessfulTasks: 5, TotalMs: 7 * 2345, LastTaskAt: ago(6 * time.Hour), RatingSum: 9, RatingCount: 3}, 70.9},
		{"perfect", store.NodeStats{TotalTasks: 1, SuccessfulTasks: 1, LastTaskAt: ago(0), RatingSum: 5, RatingCount: 1}, 100},
		// A clock ahead elsewhere must not lift recency above 1 (would be 90.8).
		{"last task in the future", store.NodeStats{TotalTasks: 1, SuccessfulTasks: 1, LastTaskAt: ago(-time.Hour)}, 90},
		{"no last task time", store.NodeStats{TotalTasks: 2, SuccessfulTasks: 2}, 70},
		{"slower than 10 s", store.NodeStats{TotalTasks: 1, SuccessfulTasks: 1, TotalMs: 20000, LastTaskAt: ago(0)}, 70},
		{"worst", store.NodeStats{TotalTasks: 5, TotalMs: 500000, LastTaskAt: ago(100 * time.Hour), RatingSum: 5, RatingCount: 5}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := store.Score(tc.s, now); got != tc.want {
				t.Errorf("Score = %v, want %v", got, tc.want)
			}
		})
	}
}

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type repFixture struct {
	rp  *store.Reputation
	w   *store.Writer
	hs  *hookStore
	clk *clock
}

// newRep builds a Reputation over a writer that only writes when told
// (FlushInterval of an hour) unless the config says otherwise.
func newRep(t *testing.T, wcfg store.WriterConfig) repFixture {
	t.Helper()
	if wcfg.FlushInterval == 0 {
		wcfg.FlushInterval = time.Hour
	}
	w, hs, _ := newWriter(t, wcfg)
	clk := &clock{now: time.Now().UTC().Truncate(time.Second)}
	rp := store.NewReputation(hs, w, store.ReputationConfig{Logger: quiet, Now: clk.Now})
	return repFixture{rp: rp, w: w, hs: hs, clk: clk}
}

func (f repFixture) total(t *testing.T, node string) int64 {
	t.Helper()
	rep, err := f.rp.Report(testCtx(t), node)
	if err != nil {
		t.Fatal(err)
	}
	return rep.TotalTasks
}

func (f repFixture) dbTotal(t *testing.T, node string) int64 {
	t.Helper()
	m, err := f.hs.Store.NodeStats(testCtx(t), []string{node})
	if err != nil {
		t.Fatal(err)
	}
	return m[node].TotalTasks
}

func TestReputationGetUnknown(t *testing.T) {
	f := newRep(t, store.WriterConfig{})
	if v := f.rp.Get("nobody"); v != (store.View{Score: 50}) {
		t.Errorf("Get(unknown) = %+v, want score 50, no average, not suspended", v)
	}
}

func TestReputationObserve(t *testing.T) {
	f := newRep(t, store.WriterConfig{})
	f.rp.Observe(store.Outcome{NodeID: "n1", Success: true, ElapsedMs: 1000})
	// 40 + 20·0.9 + 20 + 10, at once, before anything is written.
	if v := f.rp.Get("n1"); v != (store.View{Score: 88, AvgMs: 1000}) {
		t.Errorf("Get after one outcome = %+v, want score 88, avg 1000 ms", v)
	}
	if st := f.w.Stats(); st.PendingOutcomes != 1 {
		t.Errorf("writer has %d outcomes pending, want the observed one", st.PendingOutcomes)
	}
	if err := f.w.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := f.dbTotal(t, "n1"); got != 1 {
		t.Errorf("database has %d tasks for n1, want 1", got)
	}
}

// Routing's View of a node is computed once and reused, but never across a
// change of the node's counters: each change below is seen at the same
// instant of the clock, well inside the reuse window.
func TestReputationViewFollowsEveryChange(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{})
	f.rp.Observe(store.Outcome{NodeID: "n1", Success: true, ElapsedMs: 1000})
	now := f.clk.Now()
	last := f.rp.ViewAt("n1", now)
	if last != (store.View{Score: 88, AvgMs: 1000}) {
		t.Fatalf("first view = %+v, want score 88, avg 1000 ms", last)
	}
	changed := func(what string) {
		t.Helper()
		v := f.rp.ViewAt("n1", now)
		if v == last {
			t.Errorf("after %s the view is still %+v", what, v)
		}
		if g := f.rp.Get("n1"); g != v {
			t.Errorf("after %s Get = %+v, ViewAt = %+v", what, g, v)
		}
		last = v
	}
	f.rp.Observe(store.Outcome{NodeID: "n1", Success: false, ElapsedMs: 3000})
	changed("an outcome")
	f.rp.Rated([]string{"n1"}, 5)
	changed("a rating")
	must(t, f.w.Flush(ctx))
	must(t, f.hs.Store.ApplyOutcomes(ctx, []store.Outcome{{NodeID: "n1", Success: true, ElapsedMs: 10, At: now}}))
	must(t, f.rp.Refresh(ctx))
	changed("a refresh that read another instance's outcome")
	if v := f.rp.ViewAt("n1", now); v != last {
		t.Errorf("a second read with no change = %+v, want %+v", v, last)
	}
}

func TestReputationSuspends(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{})
	accounts := []string{"acct-1", "acct-2", "acct-3"}
	n := 0
	timeout := func() store.Outcome {
		n++ // failures seen by three accounts in turn
		return store.Outcome{NodeID: "bad", Success: false, ElapsedMs: 60000, Account: accounts[n%3]}
	}
	for range 10 {
		f.rp.Observe(timeout())
		f.rp.Observe(store.Outcome{NodeID: "good", Success: true, ElapsedMs: 100})
	}
	// Score 30 (< 35), but 10 tasks is not more than 10.
	if v := f.rp.Get("bad"); v.Suspended || v.Score != 30 {
		t.Fatalf("after 10 timeouts: %+v, want score 30 and not yet suspended", v)
	}
	f.rp.Observe(timeout())
	f.rp.Observe(store.Outcome{NodeID: "good", Success: true, ElapsedMs: 100})
	if v := f.rp.Get("bad"); !v.Suspended {
		t.Fatalf("after 11 timeouts: %+v, want suspended", v)
	}
	if v := f.rp.Get("good"); v.Suspended {
		t.Errorf("a good node was suspended: %+v", v)
	}
	until := f.clk.Now().Add(24 * time.Hour)

	// A refresh before the suspension is written must not lift it.
	if err := f.rp.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if !f.rp.Get("bad").Suspended {
		t.Error("Refresh lifted a suspension the writer had not written yet")
	}
	if err := f.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := f.hs.Store.NodeStats(ctx, []string{"bad", "good"})
	if err != nil {
		t.Fatal(err)
	}
	if s := m["bad"].SuspendedUntil; s == nil || !s.Equal(until) {
		t.Errorf("stored suspension = %v, want %v", s, until)
	}
	if s := m["good"].SuspendedUntil; s != nil {
		t.Errorf("good node stored as suspended until %v", s)
	}

	f.clk.Add(24*time.Hour - time.Second)
	if !f.rp.Get("bad").Suspended {
		t.Error("suspension ended early")
	}
	f.clk.Add(2 * time.Second)
	if f.rp.Get("bad").Suspended {
		t.Error("suspension did not end after 24 h")
	}
}

// No single account can get a node suspended (invariant 15):
// however many of its requests fail, and however low the score falls,
// suspension needs failures seen by SuspendMinAccounts distinct accounts
// within FailureWindow.
func TestReputationOneAccountCannotSuspend(t *testing.T) {
	f := newRep(t, store.WriterConfig{})
	fail := func(acct string) {
		f.rp.Observe(store.Outcome{NodeID: "victim", Success: false, ElapsedMs: 60000, Account: acct})
	}
	for range 50 {
		fail("attacker")
	}
	if v := f.rp.Get("victim"); v.Suspended || v.Score >= 35 {
		t.Fatalf("after 50 failures from one account: %+v, want a low score but not suspended", v)
	}
	// A second account is not enough either.
	for range 5 {
		fail("attacker-2")
	}
	if v := f.rp.Get("victim"); v.Suspended {
		t.Fatalf("two accounts got the node suspended: %+v", v)
	}
	// Failures older than the window no longer count: a third account an
	// hour later does not complete the set.
	f.clk.Add(time.Hour + time.Minute)
	fail("third")
	if v := f.rp.Get("victim"); v.Suspended {
		t.Fatalf("failures outside the window counted: %+v", v)
	}
	// Three accounts within the window: the node really fails for everyone.
	fail("attacker")
	fail("attacker-2")
	if v := f.rp.Get("victim"); !v.Suspended {
		t.Fatalf("failures from three accounts within the window: %+v, want suspended", v)
	}
}

// Successes do not count as failing accounts, and anonymous outcomes (no
// Account) are one requester.
func TestReputationFailingAccountsIgnoreSuccess(t *testing.T) {
	f := newRep(t, store.WriterConfig{})
	for i := range 5 {
		f.rp.Observe(store.Outcome{NodeID: "n", Success: true, ElapsedMs: 60000, Account: fmt.Sprint("ok-", i)})
	}
	// 5 of 105 completed, slow: 1.9+0+20+10 = 31.9.
	for range 100 {
		f.rp.Observe(store.Outcome{NodeID: "n", Success: false, ElapsedMs: 60000})
	}
	if v := f.rp.Get("n"); v.Suspended || v.Score >= 35 {
		t.Fatalf("anonymous failures and other accounts' successes: %+v, want low score, not suspended", v)
	}
}

// Outcomes are counted once whether they are still in the writer, written,
// or written by another instance.
func TestReputationRefreshCountsOnce(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{})
	for range 3 {
		f.rp.Observe(store.Outcome{NodeID: "n1", Success: true, ElapsedMs: 10})
	}
	step := func(what string, wantMem, wantDB int64) {
		t.Helper()
		if got := f.total(t, "n1"); got != wantMem {
			t.Errorf("%s: reputation counts %d tasks, want %d", what, got, wantMem)
		}
		if got := f.dbTotal(t, "n1"); got != wantDB {
			t.Errorf("%s: database has %d tasks, want %d", what, got, wantDB)
		}
	}
	step("observed", 3, 0)
	must(t, f.rp.Refresh(ctx))
	step("refreshed before the write", 3, 0)
	must(t, f.w.Flush(ctx))
	step("written", 3, 3)
	must(t, f.rp.Refresh(ctx))
	step("refreshed after the write", 3, 3)

	// Another instance writes two outcomes for the same node.
	must(t, f.hs.Store.ApplyOutcomes(ctx, []store.Outcome{{NodeID: "n1", Success: false, ElapsedMs: 60000, At: time.Now()}, {NodeID: "n1", Success: true, At: time.Now()}}))
	step("written elsewhere", 3, 5)
	must(t, f.rp.Refresh(ctx))
	step("refreshed after the other instance", 5, 5)

	f.rp.Observe(store.Outcome{NodeID: "n1", Success: true, ElapsedMs: 10})
	must(t, f.rp.Refresh(ctx))
	step("observed and refreshed", 6, 5)
	must(t, f.w.Flush(ctx))
	must(t, f.rp.Refresh(ctx))
	step("all written and refreshed", 6, 6)
}

// The race reload is built for: a batch of outcomes commits between
// Refresh's read of the database and its look at the writer's queue. Were
// that allowed, the outcome would be in neither and be lost from memory.
func TestReputationRefreshRacesCommit(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{})
	f.rp.Observe(store.Outcome{NodeID: "n1", Success: true})
	must(t, f.w.Flush(ctx))
	<-f.hs.outBatches

	f.hs.blockStats = make(chan struct{})
	refreshed := make(chan error, 1)
	go func() { refreshed <- f.rp.Refresh(ctx) }()
	wait(t, f.hs.statsEntered, "Refresh to have read the database")

	f.rp.Observe(store.Outcome{NodeID: "n1", Success: true})
	flushed := make(chan error, 1)
	go func() { flushed <- f.w.Flush(ctx) }()
	// The commit must wait for the refresh. This only checks that it does
	// not happen, so a bounded wait is the check, not synchronisation.
	select {
	case <-f.hs.outBatches:
		t.Fatal("outcomes committed while Refresh was between reading the database and the queue")
	case <-time.After(100 * time.Millisecond):
	}
	close(f.hs.blockStats)
	must(t, wait(t, refreshed, "Refresh"))
	if got := f.total(t, "n1"); got != 2 {
		t.Errorf("after the refresh: %d tasks, want 2", got)
	}
	must(t, wait(t, flushed, "Flush"))
	must(t, f.rp.Refresh(ctx))
	if got := f.total(t, "n1"); got != 2 {
		t.Errorf("after the commit and another refresh: %d tasks, want 2", got)
	}
}

// Observing, writing and refreshing all at once, with readers on the hot
// path: at the end memory, database and outcome count agree.
func TestReputationConcurrent(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{FlushInterval: time.Millisecond, BatchSize: 7})
	const observers, each = 4, 250
	nodes := []string{"n1", "n2", "n3"}
	stop := make(chan struct{})
	var bg, obs sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				if err := f.rp.Refresh(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				for _, n := range nodes {
					_ = f.rp.Get(n)
				}
			}
		}
	})
	for i := range observers {
		obs.Go(func() {
			for j := range each {
				f.rp.Observe(store.Outcome{NodeID: nodes[(i+j)%len(nodes)], Success: j%3 != 0, ElapsedMs: 5})
			}
		})
	}
	obs.Wait()
	close(stop)
	bg.Wait()
	must(t, f.w.Flush(ctx))

	var mem, db int64
	for _, n := range nodes {
		mem += f.total(t, n)
		db += f.dbTotal(t, n)
	}
	if mem != observers*each || db != observers*each {
		t.Errorf("memory counts %d, database %d, want both %d", mem, db, observers*each)
	}
	must(t, f.rp.Refresh(ctx))
	mem = 0
	for _, n := range nodes {
		mem += f.total(t, n)
	}
	if mem != observers*each {
		t.Errorf("after a final refresh memory counts %d, want %d", mem, observers*each)
	}
}

func TestReputationRate(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{})
	a, _, err := f.hs.CreateAccount(ctx, "rater", "", "")
	must(t, err)
	r := rec("t-1")
	r.AccountID, r.NodeIDs = a.ID, []string{"n1", "n2"}
	f.w.AddTask(r) // still buffered when rated

	nodes, err := f.rp.Rate(ctx, "t-1", a.ID, 4, f.clk.Now())
	must(t, err)
	if !slices.Equal(nodes, []string{"n1", "n2"}) {
		t.Errorf("Rate = %v", nodes)
	}
	ratings := func(what string, want int64) {
		t.Helper()
		for _, n := range nodes {
			rep, err := f.rp.Report(ctx, n)
			must(t, err)
			if rep.TotalRatings != want || (want > 0 && rep.AvgRating != 4) {
				t.Errorf("%s: %s has %d ratings averaging %v, want %d of 4", what, n, rep.TotalRatings, rep.AvgRating, want)
			}
		}
	}
	ratings("rated", 1)
	must(t, f.rp.Refresh(ctx))
	ratings("refreshed", 1)
	if _, err := f.rp.Rate(ctx, "t-1", a.ID, 4, f.clk.Now()); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second Rate = %v, want ErrConflict", err)
	}
	ratings("refused second rating", 1)

	// Rated, after a Store.Rate made elsewhere.
	r2 := rec("t-2")
	r2.AccountID, r2.NodeIDs = a.ID, []string{"n3"}
	must(t, f.hs.Store.WriteTasks(ctx, []store.TaskRecord{r2}))
	n3, err := f.hs.Store.Rate(ctx, "t-2", a.ID, 2, f.clk.Now())
	must(t, err)
	f.rp.Rated(n3, 2)
	rep, _ := f.rp.Report(ctx, "n3")
	must(t, f.rp.Refresh(ctx))
	rep2, _ := f.rp.Report(ctx, "n3")
	if rep.TotalRatings != 1 || rep2.TotalRatings != 1 || rep2.AvgRating != 2 {
		t.Errorf("n3 after Rated: %+v, after Refresh: %+v; want one rating of 2", rep, rep2)
	}
}

func TestReputationLoad(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{})
	var outs []store.Outcome
	for i := range 4 {
		outs = append(outs, store.Outcome{NodeID: "n1", Success: i%2 == 0, ElapsedMs: 1000, At: f.clk.Now()})
	}
	must(t, f.hs.Store.ApplyOutcomes(ctx, outs))
	if v := f.rp.Get("n1"); v.Score != 50 {
		t.Errorf("before Load: %+v, want the unknown-node view", v)
	}
	must(t, f.rp.Load(ctx, []string{"n1", "n-new"}))
	// 40·0.5 + 20·0.9 + 20 + 10
	if v := f.rp.Get("n1"); v != (store.View{Score: 68, AvgMs: 1000}) {
		t.Errorf("after Load: %+v, want score 68, avg 1000 ms", v)
	}
	if v := f.rp.Get("n-new"); v != (store.View{Score: 50}) {
		t.Errorf("a node unknown to the store: %+v", v)
	}
}

func TestReputationReport(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{})
	a, _, err := f.hs.CreateAccount(ctx, "r", "", "")
	must(t, err)
	must(t, f.hs.Store.ApplyOutcomes(ctx, []store.Outcome{
		{NodeID: "n1", Success: true, ElapsedMs: 500, At: f.clk.Now()},
		{NodeID: "n1", Success: true, ElapsedMs: 300, At: f.clk.Now()},
		{NodeID: "n1", Success: false, ElapsedMs: 200, At: f.clk.Now()},
	}))
	for i, rating := range []int{4, 4, 3} {
		r := rec(fmt.Sprintf("t-%d", i))
		r.AccountID = a.ID
		must(t, f.hs.Store.WriteTasks(ctx, []store.TaskRecord{r}))
		_, err := f.hs.Store.Rate(ctx, r.ID, a.ID, rating, f.clk.Now())
		must(t, err)
	}
	// Not loaded: read from the store. 40·2/3 + 20·(1−1000/3/10000) + 20 + 20·(11/3/5) = 80.67
	rep, err := f.rp.Report(ctx, "n1")
	must(t, err)
	want := store.Report{NodeID: "n1", Score: 80.7, TotalTasks: 3, SuccessRate: 0.667, AvgResponseMs: 333.3, AvgRating: 3.67, TotalRatings: 3}
	if rep != want {
		t.Errorf("Report = %+v\nwant     %+v", rep, want)
	}
	js, _ := json.Marshal(rep)
	var keys map[string]any
	must(t, json.Unmarshal(js, &keys))
	for _, k := range []string{"node_id", "score", "total_tasks", "success_rate", "avg_response_ms", "avg_rating", "total_ratings"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("Report JSON %s lacks %q", js, k)
		}
	}
	if len(keys) != 7 {
		t.Errorf("Report JSON has %d keys, want GemmaNet's 7: %s", len(keys), js)
	}

	rep, err = f.rp.Report(ctx, "nobody")
	must(t, err)
	if rep != (store.Report{NodeID: "nobody", Score: 50}) {
		t.Errorf("Report(unknown) = %+v, want zeros and score 50", rep)
	}
	if v := f.rp.Get("nobody"); v != (store.View{Score: 50}) {
		t.Error("Report made an unknown node known")
	}
}

// Reports answers many nodes at once: the known ones from memory (with
// outcomes not written yet), the rest in one store read, unknown ones as
// new nodes.
func TestReputationReports(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{})
	must(t, f.hs.Store.ApplyOutcomes(ctx, []store.Outcome{{NodeID: "stored", Success: true, ElapsedMs: 100, At: f.clk.Now()}}))
	must(t, f.rp.Load(ctx, []string{"known"}))
	f.rp.Observe(store.Outcome{NodeID: "known", Success: true, ElapsedMs: 40, At: f.clk.Now()})
	got, err := f.rp.Reports(ctx, []string{"known", "stored", "nobody"})
	must(t, err)
	if len(got) != 3 || got["known"].TotalTasks != 1 || got["known"].AvgResponseMs != 40 ||
		got["stored"].TotalTasks != 1 || got["nobody"].Score != 50 || got["nobody"].SuspendedUntil != nil {
		t.Fatalf("Reports = %+v", got)
	}
}

func TestReputationLeaderboard(t *testing.T) {
	ctx := testCtx(t)
	f := newRep(t, store.WriterConfig{})
	for _, n := range []string{"a", "b", "c"} {
		must(t, f.hs.RecordNode(ctx, "node-"+n, "acct", "name-"+n))
	}
	now := f.clk.Now()
	must(t, f.hs.Store.ApplyOutcomes(ctx, []store.Outcome{
		{NodeID: "node-a", Success: true, ElapsedMs: 100, At: now},
		{NodeID: "node-c", Success: false, ElapsedMs: 60000, At: now},
	}))
	order := func(limit int) []string {
		t.Helper()
		lb, err := f.rp.Leaderboard(ctx, limit)
		must(t, err)
		var out []string
		for _, e := range lb {
			if e.Name != "name-"+e.NodeID[len("node-"):] {
				t.Errorf("entry %s named %q", e.NodeID, e.Name)
			}
			out = append(out, e.NodeID)
		}
		return out
	}
	// a: 40+19.8+20+10 = 89.8; b: new, 50; c: 0+0+20+10 = 30.
	if got := order(0); !slices.Equal(got, []string{"node-a", "node-b", "node-c"}) {
		t.Errorf("Leaderboard = %v, want a, b, c", got)
	}
	if got := order(2); !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Errorf("Leaderboard(2) = %v, want a, b", got)
	}
	// This instance's unwritten outcomes count: a fails a lot, here only,
	// once the cached ranking has expired.
	must(t, f.rp.Load(ctx, []string{"node-a"}))
	for range 5 {
		f.rp.Observe(store.Outcome{NodeID: "node-a", Success: false, ElapsedMs: 60000})
	}
	if got := order(0); !slices.Equal(got, []string{"node-a", "node-b", "node-c"}) {
		t.Errorf("Leaderboard within its TTL = %v, want the cached a, b, c", got)
	}
	f.clk.Add(5 * time.Second)
	if got := order(0); !slices.Equal(got, []string{"node-b", "node-a", "node-c"}) {
		t.Errorf("Leaderboard with local outcomes = %v, want b, a, c", got)
	}

	lb, err := f.rp.Leaderboard(ctx, 1)
	must(t, err)
	js, _ := json.Marshal(lb[0])
	var keys map[string]any
	must(t, json.Unmarshal(js, &keys))
	if _, ok := keys["name"]; !ok || len(keys) != 8 {
		t.Errorf("leaderboard entry JSON %s: want the report's 7 keys plus name", js)
	}
}

func TestReputationRun(t *testing.T) {
	f := newRep(t, store.WriterConfig{})
	rp := store.NewReputation(f.hs, f.w, store.ReputationConfig{Logger: quiet, RefreshInterval: 5 * time.Millisecond})
	f.rp = rp
	ctx, cancel := context.WithCancel(testCtx(t))
	must(t, f.rp.Load(ctx, []string{"n1"}))
	done := make(chan error, 1)
	go func() { done <- f.rp.Run(ctx) }()

	must(t, f.hs.Store.ApplyOutcomes(ctx, []store.Outcome{{NodeID: "n1", Success: true, At: time.Now()}}))
	deadline := time.Now().Add(10 * time.Second)
	for f.total(t, "n1") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("Run never refreshed the node")
		}
		wait(t, f.hs.statsEntered, "a periodic refresh")
	}
	cancel()
	if err := wait(t, done, "Run to return"); err != nil {
		t.Errorf("Run returned %v after its context ended, want nil", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Routing asks for the standing of every capable node for every request,
// from many goroutines: 20 nodes a pick, as in the load test's sweep, and
// each request's outcome changes one node's counters. Get reads the clock
// for each node; ViewAt once a pick, as the dispatcher does.
func BenchmarkReputationGet(b *testing.B) {
	st, err := store.Open(context.Background(), store.Options{DataDir: b.TempDir(), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	w := store.NewWriter(st, store.WriterConfig{Logger: quiet})
	defer runWriter(b, w)()
	rp := store.NewReputation(st, w, store.ReputationConfig{Logger: quiet})
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%d", i)
		rp.Observe(store.Outcome{NodeID: ids[i], Success: true, ElapsedMs: 100})
	}
	for _, bc := range []struct {
		name string
		view func(id string, now time.Time) store.View
	}{
		{"Get", func(id string, _ time.Time) store.View { return rp.Get(id) }},
		{"ViewAt", rp.ViewAt},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ { // one pick: every node once
					now := time.Now()
					for _, id := range ids {
						if bc.view(id, now).Score <= 0 {
							b.Fatal("no score")
						}
					}
					rp.Observe(store.Outcome{NodeID: ids[i%len(ids)], Success: true, ElapsedMs: 100})
				}
			})
		})
	}
}

// countingStore counts reads of the whole node table, and can fail them.
type countingStore struct {
	store.Store
	all  atomic.Int64
	fail atomic.Bool
}

func (c *countingStore) AllNodeStats(ctx context.Context) ([]store.NodeStats, error) {
	c.all.Add(1)
	if c.fail.Load() {
		return nil, fmt.Errorf("%w: stalled", store.ErrUnavailable)
	}
	return c.Store.AllNodeStats(ctx)
}

// The public leaderboard reads the node table at most once per TTL, however
// many callers ask, and a failed read is an error (503 upstream), not a
// stale or empty ranking cached for later.
func TestReputationLeaderboardCached(t *testing.T) {
	ctx := testCtx(t)
	cs := &countingStore{Store: openSQLite(t)}
	w := store.NewWriter(cs, store.WriterConfig{FlushInterval: time.Hour, Logger: quiet})
	runWriter(t, w)
	clk := &clock{now: time.Now().UTC()}
	rp := store.NewReputation(cs, w, store.ReputationConfig{Logger: quiet, Now: clk.Now})
	must(t, cs.RecordNode(ctx, "n1", "acct", "one"))

	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lb, err := rp.Leaderboard(ctx, 10)
			if err != nil || len(lb) != 1 {
				t.Errorf("Leaderboard: %v, %v", lb, err)
			}
		}()
	}
	wg.Wait()
	if n := cs.all.Load(); n != 1 {
		t.Errorf("50 calls within the TTL read the node table %d times, want 1", n)
	}
	clk.Add(5 * time.Second)
	cs.fail.Store(true)
	if _, err := rp.Leaderboard(ctx, 10); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Leaderboard with the store failing: %v, want ErrUnavailable", err)
	}
	cs.fail.Store(false)
	if _, err := rp.Leaderboard(ctx, 10); err != nil || cs.all.Load() != 3 {
		t.Errorf("Leaderboard after a failed read: %v (reads %d, want 3)", err, cs.all.Load())
	}
}
