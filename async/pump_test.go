package async_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/async"
	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// stores runs f against the real SQLite and PostgreSQL stores.
func stores(t *testing.T, f func(t *testing.T, st store.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := store.Open(t.Context(), store.Options{DataDir: t.TempDir(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		f(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		st, err := store.Open(t.Context(), store.Options{DatabaseURL: pgtest.SchemaURL(t, "sytest"), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		f(t, st)
	})
}

// nodes is a fake of this instance's nodes and of the engine that runs
// tasks on them: slots slots of taskType; each task runs until release
// lets it (or its context ends), and answers "done:<content>".
type nodes struct {
	taskType string
	slots    int

	mu      sync.Mutex
	busy    int
	order   []string // task ids in the order they reached a node
	runs    map[string]int
	release chan struct{} // nil: answer at once
	started chan string   // each task id as it reaches a node (buffered)
}

func newNodes(taskType string, slots int) *nodes {
	return &nodes{taskType: taskType, slots: slots, runs: map[string]int{}, started: make(chan string, 1000)}
}

func (n *nodes) Free() []async.Free {
	n.mu.Lock()
	defer n.mu.Unlock()
	if free := n.slots - n.busy; free > 0 {
		return []async.Free{{TaskType: n.taskType, Slots: free}}
	}
	return nil
}

func (n *nodes) RunTask(ctx context.Context, req tasks.Request, h tasks.Hooks) (tasks.Outcome, error) {
	if !req.LocalOnly {
		return tasks.Outcome{}, errors.New("an async task must run on local nodes only")
	}
	n.mu.Lock()
	if n.busy >= n.slots {
		n.mu.Unlock()
		return tasks.Outcome{}, &tasks.Error{Code: tasks.CodeBusy, Message: "full"}
	}
	n.busy++
	n.order = append(n.order, req.TaskID)
	n.runs[req.TaskID]++
	rel := n.release
	n.mu.Unlock()
	defer func() { n.mu.Lock(); n.busy--; n.mu.Unlock() }()
	h.Assigned()
	n.started <- req.TaskID
	if rel != nil {
		select {
		case <-rel:
		case <-ctx.Done():
			return tasks.Outcome{}, &tasks.Error{Code: tasks.CodeCanceled, Message: "the client went away"}
		}
	}
	return tasks.Outcome{TaskID: req.TaskID, NodeID: "n1", Status: tasks.StatusCompleted, Result: "done:" + req.Content, ProcessingMs: 3}, nil
}

func (n *nodes) served() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.order...)
}

// hooks records the webhooks queued.
type hooks struct {
	async.NoWebhooks
	mu   sync.Mutex
	got  map[string][]byte
	fail bool
}

func (h *hooks) Enqueue(_ context.Context, accountID, url, eventID string, body []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail {
		return errors.New("webhooks down")
	}
	if h.got == nil {
		h.got = map[string][]byte{}
	}
	h.got[eventID] = body
	return nil
}

func (h *hooks) body(id string) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[id]
}

// newPump builds a pump and runs it until the test ends.
func newPump(t *testing.T, st store.Store, n *nodes, mutate func(*async.Deps)) *async.Pump {
	p := buildPump(t, st, n, mutate)
	runPump(t, p)
	return p
}

func buildPump(t *testing.T, st store.Store, n *nodes, mutate func(*async.Deps)) *async.Pump {
	deps := async.Deps{Queue: st, Runner: n, Local: n}
	if mutate != nil {
		mutate(&deps)
	}
	return async.New(async.Config{Instance: "inst-" + t.Name(), Logger: quiet}, deps)
}

// runPump runs p until the returned stop is called or the test ends; stop
// returns once p's Run has (and fails the test if Run failed).
func runPump(t *testing.T, p *async.Pump) (stop func()) {
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(c) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func task(id, account, content string) store.AsyncTask {
	return store.AsyncTask{ID: id, AccountID: account, TaskType: "echo", Content: content, Priority: 5, TTL: time.Hour}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// A submitted task runs on a local node and ends completed; a waiter
// wakes with the end, well before its wait is over.
func TestPumpRunsASubmittedTask(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		n := newNodes("echo", 1)
		p := newPump(t, st, n, nil)
		if err := p.Submit(ctx(t), task("t1", "acct-x", "hello")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got, err := p.Wait(ctx(t), "t1", time.Now().Add(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != store.AsyncCompleted || got.Result != "done:hello" || got.NodeID != "n1" || got.Attempts != 1 {
			t.Fatalf("task ended %+v", got)
		}
		if waited := time.Since(start); waited > 5*time.Second {
			t.Errorf("the waiter woke after %s", waited)
		}
	})
}

// Waiting work is served by priority, then accounts in turn: X with 200
// queued and Y with 5, one slot: Y's five are among the first ten served.
func TestPumpFairAcrossAccounts(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		c := ctx(t)
		for i := range 200 {
			if err := st.SubmitAsync(c, task(fmt.Sprintf("x%03d", i), "acct-x", "x")); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			if err := st.SubmitAsync(c, task(fmt.Sprintf("y%d", i), "acct-y", "y")); err != nil {
				t.Fatal(err)
			}
		}
		n := newNodes("echo", 1)
		newPump(t, st, n, nil)
		waitUntil(t, 60*time.Second, func() bool { return len(n.served()) >= 10 })
		ys := 0
		for _, id := range n.served()[:10] {
			if id[0] == 'y' {
				ys++
			}
		}
		if ys != 5 {
			t.Errorf("the first ten served hold %d of Y's 5: %v", ys, n.served()[:10])
		}
	})
}

// DELETE of a running task stops it on its node and ends it cancelled; a
// queued one ends cancelled at once and never runs.
func TestPumpCancel(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		n := newNodes("echo", 1)
		n.release = make(chan struct{})
		p := newPump(t, st, n, nil)
		c := ctx(t)
		if err := p.Submit(c, task("run", "acct", "a")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, n.started, "run")
		if err := p.Submit(c, task("queued", "acct", "b")); err != nil {
			t.Fatal(err)
		}
		q, err := p.Cancel(c, "queued", "acct")
		if err != nil || q.Status != store.AsyncCancelled {
			t.Fatalf("cancel of a queued task: %+v, %v", q, err)
		}
		if _, err := p.Cancel(c, "run", "someone-else"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("another account cancelled the task: %v", err)
		}
		r, err := p.Cancel(c, "run", "acct")
		if err != nil || r.Status != store.AsyncRunning {
			t.Fatalf("cancel of a running task: %+v, %v", r, err)
		}
		got, err := p.Wait(c, "run", time.Now().Add(20*time.Second))
		if err != nil || got.Status != store.AsyncCancelled || got.ErrorCode != "cancelled" {
			t.Fatalf("the running task ended %+v, %v", got, err)
		}
		if runs := n.served(); len(runs) != 1 {
			t.Errorf("nodes ran %v; the queued task was cancelled before it ran", runs)
		}
		// A second cancel of the ended task answers it as it is.
		if again, err := p.Cancel(c, "queued", "acct"); err != nil || again.Status != store.AsyncCancelled || again.FinishedAt == nil || !again.FinishedAt.Equal(*q.FinishedAt) {
			t.Errorf("a second cancel: %+v, %v", again, err)
		}
	})
}

// A running task whose instance is lost goes back to the queue and runs
// here once more (its second attempt); a lease that lapsed after its
// retry fails the task with instance_lost.
func TestPumpReleasesLostInstances(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		c := ctx(t)
		// Two claims by the ghost of one task: its retry is spent (the store
		// releases the first back to the queue, as a pump would). Then one
		// claim of another. No pump runs yet.
		if err := st.SubmitAsync(c, task("twice", "acct", "t")); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, err := st.ClaimAsync(c, "ghost", []string{"echo"}, false, time.Hour); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				if _, err := st.ReleaseAsync(c, []string{"ghost"}, async.MaxAttempts); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := st.SubmitAsync(c, task("orphan", "acct", "o")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ClaimAsync(c, "ghost", []string{"echo"}, false, time.Hour); err != nil {
			t.Fatal(err)
		}
		n := newNodes("echo", 1)
		p := newPump(t, st, n, func(d *async.Deps) {
			d.Lost = func(context.Context) ([]string, error) { return []string{"ghost"}, nil }
		})
		got, err := p.Wait(c, "orphan", time.Now().Add(25*time.Second))
		if err != nil || got.Status != store.AsyncCompleted || got.Attempts != 2 {
			t.Fatalf("the lost instance's task ended %+v, %v", got, err)
		}
		got, err = p.Wait(c, "twice", time.Now().Add(25*time.Second))
		if err != nil || got.Status != store.AsyncFailed || got.ErrorCode != "instance_lost" {
			t.Fatalf("a task lost twice ended %+v, %v", got, err)
		}
		if runs := n.served(); len(runs) != 1 || runs[0] != "orphan" {
			t.Errorf("a task lost after its retry ran again here")
		}
	})
}

// An ended task with a webhook_url is handed to Webhooks with its view as
// the body, and leaves the outbox; one whose enqueue failed stays there.
func TestPumpQueuesWebhooks(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		n := newNodes("echo", 1)
		h := &hooks{}
		p := newPump(t, st, n, func(d *async.Deps) { d.Webhooks = h })
		c := ctx(t)
		tk := task("hooked", "acct", "w")
		tk.WebhookURL = "https://example.com/hook"
		if err := p.Submit(c, tk); err != nil {
			t.Fatal(err)
		}
		got, err := p.Wait(c, "hooked", time.Now().Add(20*time.Second))
		if err != nil || got.Status != store.AsyncCompleted {
			t.Fatalf("ended %+v, %v", got, err)
		}
		waitUntil(t, 10*time.Second, func() bool { return h.body("hooked") != nil })
		var v async.View
		if err := json.Unmarshal(h.body("hooked"), &v); err != nil || v.TaskID != "hooked" || v.Status != store.AsyncCompleted || v.Result == nil || *v.Result != "done:w" {
			t.Errorf("webhook body %s (%v)", h.body("hooked"), err)
		}
		waitUntil(t, 10*time.Second, func() bool {
			pend, err := st.PendingWebhooks(c, time.Now().Add(time.Hour), 10)
			return err == nil && len(pend) == 0
		})

		// A queued task cancelled before it runs ends too: its webhook goes.
		// Its task type is one no local node serves, so that no claim can
		// take it first (one already under way when the slots were taken
		// away could: the pump reads its free slots before it claims).
		tk = task("cancelled", "acct", "c")
		tk.TaskType = "served-by-nobody"
		tk.WebhookURL = "https://example.com/hook"
		if err := p.Submit(c, tk); err != nil {
			t.Fatal(err)
		}
		if got, err := p.Cancel(c, "cancelled", "acct"); err != nil || got.Status != store.AsyncCancelled {
			t.Fatalf("cancel: %+v, %v", got, err)
		}
		if err := json.Unmarshal(h.body("cancelled"), &v); err != nil || v.Status != store.AsyncCancelled || v.Error == nil || v.Error.Code != "cancelled" {
			t.Errorf("the cancelled task's webhook body %s (%v)", h.body("cancelled"), err)
		}

		h.mu.Lock()
		h.fail = true
		h.mu.Unlock()
		tk = task("unsent", "acct", "u")
		tk.WebhookURL = "https://example.com/hook"
		if err := p.Submit(c, tk); err != nil {
			t.Fatal(err)
		}
		if got, err := p.Wait(c, "unsent", time.Now().Add(20*time.Second)); err != nil || got.Status != store.AsyncCompleted {
			t.Fatalf("ended %+v, %v", got, err)
		}
		pend, err := st.PendingWebhooks(c, time.Now().Add(time.Hour), 10)
		if err != nil || len(pend) != 1 || pend[0].ID != "unsent" {
			t.Errorf("the outbox holds %v (%v); want the task whose enqueue failed", pend, err)
		}
	})
}

// A pump that stops while its task runs does not end it: the task stays
// running under its lease (another instance runs it once the lease lapses).
func TestPumpStopLeavesTheLease(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		n := newNodes("echo", 1)
		n.release = make(chan struct{})
		p := buildPump(t, st, n, nil)
		stop := runPump(t, p)
		if err := p.Submit(ctx(t), task("left", "acct", "l")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, n.started, "left")
		stop()
		got, err := st.AsyncTask(ctx(t), "left")
		if err != nil || got.Status != store.AsyncRunning {
			t.Errorf("after the pump stopped the task is %+v, %v; want still running", got, err)
		}
	})
}

// New starts nothing: a task submitted before Run waits in the queue, and
// Run claims and runs it. Run's goroutines (its loops and its tasks') are
// gone once it returns.
func TestPumpNewStartsNothing(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		n := newNodes("echo", 1)
		before := goleak.IgnoreCurrent()
		p := buildPump(t, st, n, nil)
		if err := p.Submit(ctx(t), task("early", "acct", "e")); err != nil {
			t.Fatal(err)
		}
		if err := goleak.Find(before); err != nil {
			t.Fatalf("New or Submit started a goroutine: %v", err)
		}
		if got, err := st.AsyncTask(ctx(t), "early"); err != nil || got.Status != store.AsyncQueued {
			t.Fatalf("before Run the task is %+v, %v; want queued", got, err)
		}
		stop := runPump(t, p)
		if got, err := p.Wait(ctx(t), "early", time.Now().Add(20*time.Second)); err != nil || got.Status != store.AsyncCompleted {
			t.Fatalf("once Run ran the task is %+v, %v; want completed", got, err)
		}
		stop()
		if err := goleak.Find(before); err != nil {
			t.Errorf("Run left a goroutine behind: %v", err)
		}
	})
}

func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitFor(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("got %q first, want %q", got, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%q never reached a node", want)
	}
}

// countingQueue counts the claim queries a pump makes of the real store.
type countingQueue struct {
	store.AsyncQueue
	claims atomic.Int64
}

func (q *countingQueue) ClaimAsync(ctx context.Context, owner string, types []string, official bool, lease time.Duration) (store.AsyncTask, error) {
	q.claims.Add(1)
	return q.AsyncQueue.ClaimAsync(ctx, owner, types, official, lease)
}

// Idle cost is flat: with a free node and an empty queue, freed slots
// (Nudge) cost no query once the queue was seen empty; only the poll
// (once a second) and a release's wake (every 5 s) claim. A submit heard
// from another instance claims at once, not at the poll.
func TestPumpIdleCost(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		q := &countingQueue{AsyncQueue: st}
		n := newNodes("echo", 1)
		p := newPump(t, st, n, func(d *async.Deps) { d.Queue = q })
		start := time.Now()
		waitUntil(t, 5*time.Second, func() bool { return q.claims.Load() >= 1 })
		for range 1000 {
			p.Nudge()
			time.Sleep(time.Millisecond)
		}
		elapsed := time.Since(start)
		if got, most := q.claims.Load(), int64(elapsed/async.Poll)+int64(elapsed/async.ReleaseEvery)+2; got > most {
			t.Errorf("%d claim queries in %s of idle with 1000 nudges; want at most %d", got, elapsed.Round(time.Millisecond), most)
		}

		// Another instance's submit: the store has it, the event wakes us.
		if err := st.SubmitAsync(ctx(t), task("heard", "acct", "h")); err != nil {
			t.Fatal(err)
		}
		heard := time.Now()
		p.Heard(async.Event{Kind: async.EventSubmitted, TaskID: "heard", TaskType: "echo"})
		got, err := p.Wait(ctx(t), "heard", time.Now().Add(10*time.Second))
		if err != nil || got.Status != store.AsyncCompleted {
			t.Fatalf("the heard task ended %+v, %v", got, err)
		}
		if took := time.Since(heard); took > async.Poll/2 {
			t.Errorf("the heard submit ran after %s: the event did not wake the pump", took)
		}
	})
}

// gateQueue holds the pump's first claim until the test lets it go, then
// makes it and hands the test what it claimed.
type gateQueue struct {
	store.AsyncQueue
	once             sync.Once
	entered, release chan struct{}
	claimed          chan store.AsyncTask
}

func (q *gateQueue) ClaimAsync(ctx context.Context, owner string, types []string, official bool, lease time.Duration) (store.AsyncTask, error) {
	first := false
	q.once.Do(func() { first = true })
	if !first {
		return q.AsyncQueue.ClaimAsync(ctx, owner, types, official, lease)
	}
	close(q.entered)
	<-q.release
	t, err := q.AsyncQueue.ClaimAsync(ctx, owner, types, official, lease)
	if err == nil {
		q.claimed <- t
	}
	return t, err
}

// A claim under way when the drain begins starts nothing: the task it
// claims goes back to the queue, queued as before, for another instance.
// (A draining instance claims nothing; TestAsyncDrainFinishesRunningTasks
// caught one such claim on a busy machine.)
func TestPumpDrainGivesBackAClaimUnderWay(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		c := ctx(t)
		if err := st.SubmitAsync(c, task("late", "acct", "x")); err != nil {
			t.Fatal(err)
		}
		q := &gateQueue{AsyncQueue: st, entered: make(chan struct{}), release: make(chan struct{}), claimed: make(chan store.AsyncTask, 1)}
		n := newNodes("echo", 1)
		p := newPump(t, st, n, func(d *async.Deps) { d.Queue = q })
		select {
		case <-q.entered:
		case <-c.Done():
			t.Fatal("the pump never claimed")
		}
		p.Drain()
		close(q.release)
		select {
		case got := <-q.claimed:
			if got.ID != "late" {
				t.Fatalf("claimed %s, want late", got.ID)
			}
		case <-c.Done():
			t.Fatal("the claim under way did not return")
		}
		waitUntil(t, 5*time.Second, func() bool {
			got, err := st.AsyncTask(c, "late")
			return err == nil && got.Status == store.AsyncQueued && got.Attempts == 0 && got.Owner == ""
		})
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.runs["late"] != 0 {
			t.Fatalf("the task claimed during the drain ran %d times, want never", n.runs["late"])
		}
	})
}

// admission is a fake Deps.Admission: it refuses the tasks whose content
// starts with "over" (quota_exceeded), and notes each release with the
// status the store held for its task then.
type admission struct {
	st store.Store

	mu       sync.Mutex
	asked    map[string]int
	released map[string]string // task id → its status at the release
}

func (a *admission) Admit(ctx context.Context, t store.AsyncTask) (func(), error) {
	a.mu.Lock()
	if a.asked == nil {
		a.asked = map[string]int{}
	}
	a.asked[t.ID]++
	asked := a.asked[t.ID]
	a.mu.Unlock()
	refused := &tasks.Error{Code: "quota_exceeded", Message: "this API key has used 100 of its 100 tokens_per_day"}
	switch {
	case strings.HasPrefix(t.Content, "over"):
		return nil, refused
	case strings.HasPrefix(t.Content, "later") && asked < 3:
		return nil, fmt.Errorf("%w: %w", async.ErrNotYet, refused)
	}
	return func() {
		got, err := a.st.AsyncTask(context.Background(), t.ID)
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.released == nil {
			a.released = map[string]string{}
		}
		a.released[t.ID] = got.Status
		if err != nil {
			a.released[t.ID] = err.Error()
		}
	}, nil
}

// Each claimed task passes Deps.Admission before it runs: a refused one
// (its key at a token limit when claimed, though it had room when queued)
// fails with the refusal's code and message, never reaches a node, and
// its webhook tells it; one not admitted yet (ErrNotYet) is asked again
// until it is; an admitted one runs, and its release comes after its end
// is written (its record has settled what it used by then).
func TestPumpQuotaAdmitsEachClaimedTask(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		n := newNodes("echo", 2)
		h := &hooks{}
		adm := &admission{st: st}
		p := newPump(t, st, n, func(d *async.Deps) { d.Webhooks, d.Admission = h, adm })
		c := ctx(t)
		over := task("over", "acct", "over the limit")
		over.WebhookURL = "https://example.com/hook"
		for _, tk := range []store.AsyncTask{over, task("fits", "acct", "fits"), task("later", "acct", "later")} {
			if err := p.Submit(c, tk); err != nil {
				t.Fatal(err)
			}
		}
		got, err := p.Wait(c, "over", time.Now().Add(20*time.Second))
		if err != nil || got.Status != store.AsyncFailed || got.ErrorCode != "quota_exceeded" ||
			got.ErrorMessage != "this API key has used 100 of its 100 tokens_per_day" {
			t.Fatalf("the task over its key's limit ended %+v, %v; want failed, quota_exceeded", got, err)
		}
		var view struct {
			Status string `json:"status"`
			Error  struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(h.body("over"), &view); err != nil || view.Status != store.AsyncFailed || view.Error.Code != "quota_exceeded" {
			t.Errorf("its webhook: %s (%v)", h.body("over"), err)
		}
		if got, err := p.Wait(c, "fits", time.Now().Add(20*time.Second)); err != nil || got.Status != store.AsyncCompleted {
			t.Fatalf("the task within its key's limit ended %+v, %v", got, err)
		}
		// Not admitted yet twice (another task's hold in the way), then
		// admitted: it waits for room on its claim, and runs once.
		if got, err := p.Wait(c, "later", time.Now().Add(20*time.Second)); err != nil || got.Status != store.AsyncCompleted || got.Attempts != 1 {
			t.Fatalf("the task that waited for room ended %+v, %v", got, err)
		}
		if runs := n.served(); len(runs) != 2 || slices.Contains(runs, "over") {
			t.Errorf("nodes ran %v, want only the tasks within the limit", runs)
		}
		waitUntil(t, 5*time.Second, func() bool {
			adm.mu.Lock()
			defer adm.mu.Unlock()
			return len(adm.released) == 2
		})
		adm.mu.Lock()
		defer adm.mu.Unlock()
		if adm.released["fits"] != store.AsyncCompleted || adm.released["later"] != store.AsyncCompleted || adm.asked["later"] != 3 || adm.asked["over"] != 1 {
			t.Errorf("releases %v, admissions asked %v: want the admitted tasks' releases after their ends were written, and the waiting task asked 3 times", adm.released, adm.asked)
		}
	})
}
