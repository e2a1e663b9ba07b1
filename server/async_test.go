package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	asyncq "github.com/switchyard-dev/switchyard/async"
	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
	"github.com/switchyard-dev/switchyard/store"
)

// asyncView is GET /api/v1/tasks/{id}'s answer for an async task.
type asyncView struct {
	TaskID     string     `json:"task_id"`
	Status     string     `json:"status"`
	CreatedAt  *time.Time `json:"created_at"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	NodeID     *string    `json:"node_id"`
	Attempts   int        `json:"attempts"`
	Result     *string    `json:"result"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// submit posts an async task and returns its id, failing the test unless
// it is accepted as documented (202, queued, Location).
func (ta *testApp) submit(t *testing.T, key string, body map[string]any) string {
	t.Helper()
	var got struct {
		TaskID string `json:"task_id"`
		Status string `json:"status"`
	}
	code, h := ta.call(t, http.MethodPost, "/api/v1/tasks", key, body, &got)
	if code != http.StatusAccepted || got.Status != "queued" || got.TaskID == "" {
		t.Fatalf("POST /api/v1/tasks: %d %+v", code, got)
	}
	if loc := h.Get("Location"); loc != "/api/v1/tasks/"+got.TaskID {
		t.Errorf("Location %q", loc)
	}
	return got.TaskID
}

func (ta *testApp) view(t *testing.T, key, id, query string) (int, asyncView) {
	t.Helper()
	var v asyncView
	code, _ := ta.call(t, http.MethodGet, "/api/v1/tasks/"+id+query, key, nil, &v)
	return code, v
}

// Alone: submit, the node runs it, ?wait answers the end as soon as it
// comes; another account sees 404 with the body of an unknown id.
func TestAsyncSubmitWaitAlone(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	other := ta.account(t, "mallory", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "echo"))
	id := ta.submit(t, key, map[string]any{"task_type": "echo", "content": "hi", "ttl": "2h"})

	done := async(func() asyncView { _, v := ta.view(t, key, id, "?wait=30s"); return v })
	m := n.Expect("task_assign")
	if m.TaskID() != id {
		t.Fatalf("the node got task %s, want %s", m.TaskID(), id)
	}
	n.Result(id, "completed", "hello back")
	v := waitFor(t, done, 10*time.Second)
	if v.Status != "completed" || v.Result == nil || *v.Result != "hello back" || v.NodeID == nil || *v.NodeID != n.ID || v.Attempts != 1 {
		t.Fatalf("view %+v", v)
	}
	if v.FinishedAt == nil || v.ExpiresAt == nil || v.ExpiresAt.Sub(*v.FinishedAt) != 2*time.Hour {
		t.Errorf("finished %v, expires %v: want a 2h ttl", v.FinishedAt, v.ExpiresAt)
	}

	var unknown, foreign apiErr
	c1, _ := ta.call(t, http.MethodGet, "/api/v1/tasks/no-such-task", other, nil, &unknown)
	c2, _ := ta.call(t, http.MethodGet, "/api/v1/tasks/"+id, other, nil, &foreign)
	c3, _ := ta.call(t, http.MethodDelete, "/api/v1/tasks/"+id, other, nil, &foreign)
	if c1 != 404 || c2 != 404 || c3 != 404 || foreign != unknown {
		t.Errorf("another account's task: GET %d, DELETE %d %+v; unknown: %d %+v", c2, c3, foreign, c1, unknown)
	}
}

// The documented 422s: priority 10, ttl over 7 days, a bad webhook_url
// (one on loopback too, named or literal),
// and the body rules of /api/v1/request.
func TestAsyncSubmitValidation(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	for _, c := range []struct {
		body map[string]any
		code string
		msg  string
	}{
		{map[string]any{"task_type": "echo", "content": "x", "priority": 10}, "invalid_request", "priority"},
		{map[string]any{"task_type": "echo", "content": "x", "ttl": "192h"}, "invalid_request", "ttl"},
		{map[string]any{"task_type": "echo", "content": "x", "ttl": 3600}, "invalid_request", "ttl"},
		{map[string]any{"task_type": "echo", "content": "x", "webhook_url": "ftp://example.com/x"}, "invalid_webhook_url", "webhook_url"},
		{map[string]any{"task_type": "echo", "content": "x", "webhook_url": "/relative"}, "invalid_webhook_url", "webhook_url"},
		{map[string]any{"task_type": "echo", "content": "x", "webhook_url": "https://example.com/" + strings.Repeat("a", 2029)}, "invalid_webhook_url", "at most 2048"},
		{map[string]any{"task_type": "echo", "content": "x", "webhook_url": "http://localhost:8080/x"}, "invalid_webhook_url", "not public"},
		{map[string]any{"task_type": "echo", "content": "x", "webhook_url": "http://[::ffff:127.0.0.1]/x"}, "invalid_webhook_url", "loopback"},
		{map[string]any{"content": "x"}, "invalid_request", "task_type"},
	} {
		var e apiErr
		code, _ := ta.call(t, http.MethodPost, "/api/v1/tasks", key, c.body, &e)
		if code != http.StatusUnprocessableEntity || e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("%v: %d %+v, want 422 %s mentioning %s", c.body, code, e, c.code, c.msg)
		}
		// Never what the host resolved to, nor the address it was sent:
		// the instance's view of its networks is not a client's to probe.
		if strings.Contains(e.Error.Message, "127.0.0.1") || strings.Contains(e.Error.Message, "::") {
			t.Errorf("%v: the refusal names an address: %s", c.body, e.Error.Message)
		}
	}
	if code, _ := ta.call(t, http.MethodPost, "/api/v1/tasks", "", map[string]any{"task_type": "echo", "content": "x"}, nil); code != 401 {
		t.Errorf("no key: %d, want 401", code)
	}
	var e apiErr
	if code, _ := ta.call(t, http.MethodGet, "/api/v1/tasks/"+ta.submit(t, key, map[string]any{"task_type": "echo", "content": "x"})+"?wait=soon", key, nil, &e); code != 422 {
		t.Errorf("?wait=soon: %d %+v, want 422", code, e)
	}
}

// DELETE: a queued task ends cancelled at once and never reaches a node;
// a running one is stopped on its node (task_cancel) and ends cancelled.
func TestAsyncCancel(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, nodetestWithCancel(reg(key, "n1", "echo"), 1))
	running := ta.submit(t, key, map[string]any{"task_type": "echo", "content": "long"})
	if got := n.Expect("task_assign").TaskID(); got != running {
		t.Fatalf("assign of %s, want %s", got, running)
	}
	queued := ta.submit(t, key, map[string]any{"task_type": "echo", "content": "never"})
	var v asyncView
	if code, _ := ta.call(t, http.MethodDelete, "/api/v1/tasks/"+queued, key, nil, &v); code != 200 || v.Status != "cancelled" {
		t.Fatalf("DELETE of a queued task: %d %+v", code, v)
	}
	if code, _ := ta.call(t, http.MethodDelete, "/api/v1/tasks/"+running, key, nil, &v); code != 200 || v.Status != "running" {
		t.Fatalf("DELETE of a running task: %d %+v", code, v)
	}
	if m := n.Expect("task_cancel"); m.TaskID() != running {
		t.Fatalf("task_cancel for %s, want %s", m.TaskID(), running)
	}
	_, v = ta.view(t, key, running, "?wait=10s")
	if v.Status != "cancelled" || v.Error == nil || v.Error.Code != "cancelled" {
		t.Fatalf("the running task ended %+v", v)
	}
	// The slot is free again, and the cancelled queued task never came.
	next := ta.submit(t, key, map[string]any{"task_type": "echo", "content": "next"})
	if got := n.Expect("task_assign").TaskID(); got != next {
		t.Fatalf("the node got %s, want %s (the cancelled one must never run)", got, next)
	}
}

func nodetestWithCancel(r map[string]any, slots int) map[string]any {
	r["features"] = []string{"task_cancel"}
	r["max_concurrency"] = slots
	return r
}

// Two instances on Redis and PostgreSQL, on one Redis and on a Redis
// Cluster of three masters: submitted on A (which has no node), run by
// B's node, and a waiter on A learns of the end at once (the ended event
// on sy:async:events), not at its re-read.
func TestAsyncAcrossInstances(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		a, b := startPair(t, "async", nil)
		testAsyncAcross(t, a, b)
	})
	t.Run("cluster", func(t *testing.T) {
		url, db := redistest.StartCluster(t, redistest.ClusterOptions{}).URL(), pgtest.SchemaURL(t, "asynccl")
		multi := func(c *Config) {
			c.RedisURL, c.RedisCluster, c.Namespace, c.DatabaseURL = url, true, "sytest-async", db
		}
		testAsyncAcross(t, startApp(t, multi), startApp(t, multi))
	})
}

func testAsyncAcross(t *testing.T, a, b *testApp) {
	key := a.account(t, "alice", "")
	n := connectNode(t, b.wsURL, reg(key, "n1", "echo"))
	id := a.submit(t, key, map[string]any{"task_type": "echo", "content": "hi"})
	m := n.Expect("task_assign")
	if m.TaskID() != id {
		t.Fatalf("assign of %s, want %s", m.TaskID(), id)
	}
	_, v := a.view(t, key, id, "")
	if v.Status != "running" {
		t.Fatalf("before its result the task is %+v", v)
	}
	done := async(func() time.Time { a.view(t, key, id, "?wait=30s"); return time.Now() })
	waitUntil(t, func() bool { return a.pump.Waiters() == 1 })
	n.Result(id, "completed", "from B")
	ended := time.Now()
	got := waitFor(t, done, 10*time.Second)
	// The waiter waits before the end: its re-read would come up to
	// WaitRecheck (2 s) later, the event well within a second.
	if lag := got.Sub(ended); lag > asyncq.WaitRecheck/2 {
		t.Errorf("the waiter on A answered %s after the end on B", lag)
	}
	_, v = a.view(t, key, id, "")
	if v.Status != "completed" || v.Result == nil || *v.Result != "from B" {
		t.Fatalf("view on A %+v", v)
	}
	_, vb := b.view(t, key, id, "")
	if vb.Status != "completed" {
		t.Fatalf("view on B %+v", vb)
	}
}

// Fairness in the async queue over HTTP: X with 200 queued, Y with 5, one
// node with one slot: Y's five are among the first ten the node gets.
func TestAsyncFairAcrossAccounts(t *testing.T) {
	ta := startApp(t, nil)
	x, y := ta.account(t, "x", ""), ta.account(t, "y", "")
	ys := map[string]bool{}
	for i := range 200 {
		ta.submit(t, x, map[string]any{"task_type": "echo", "content": fmt.Sprint("x", i)})
	}
	for i := range 5 {
		ys[ta.submit(t, y, map[string]any{"task_type": "echo", "content": fmt.Sprint("y", i)})] = true
	}
	n := connectNode(t, ta.wsURL, nodetestWithCancel(reg(x, "n1", "echo"), 1))
	served := 0
	for range 10 {
		id := n.Expect("task_assign").TaskID()
		if ys[id] {
			served++
		}
		n.Result(id, "completed", "ok")
	}
	if served != 5 {
		t.Errorf("Y's 5 tasks: %d among the first 10 served", served)
	}
}

// The Go SDK end to end: SubmitTask, WaitTask until the SDK node's answer,
// CancelTask of a queued task, and errors as *sdk.APIError.
func TestAsyncSDK(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	cl := e2eClient(t, ta, key)
	ctx := e2eCtx(t)

	// Queued with no node yet: cancel it.
	id, err := cl.SubmitTask(ctx, sdk.AsyncTask{TaskType: "echo", Content: "first", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	v, err := cl.CancelTask(ctx, id)
	if err != nil || v.Status != "cancelled" || !v.Final() {
		t.Fatalf("CancelTask: %+v, %v", v, err)
	}
	prio := 9
	_, err = cl.SubmitTask(ctx, sdk.AsyncTask{TaskType: "echo", Content: "x", TTL: 30 * 24 * time.Hour, Priority: &prio})
	asAPIError(t, err, http.StatusUnprocessableEntity, "invalid_request")
	_, err = cl.CancelTask(ctx, "no-such-task")
	asAPIError(t, err, http.StatusNotFound, "task_not_found")

	id, err = cl.SubmitTask(ctx, sdk.AsyncTask{TaskType: "echo", Content: "hello", Priority: &prio})
	if err != nil {
		t.Fatal(err)
	}
	runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "echoer", Capabilities: []string{"echo"}, Handler: handlers.Echo()})
	v, err = cl.WaitTask(ctx, id, 2*time.Second)
	if err != nil || v.Status != "completed" || v.Result != "hello" || v.Attempts != 1 || v.Priority != 9 {
		t.Fatalf("WaitTask: %+v, %v", v, err)
	}
}

// A PostgreSQL stopped by SIGSTOP does not wedge the instance (invariant
// 14): a submit gets 503 store_unavailable within the store's
// deadline, synchronous requests of a cached key are served meanwhile,
// and an async task whose node answered during the stall ends completed
// once PostgreSQL runs again (its end is retried, its lease kept).
func TestAsyncStalledPostgres(t *testing.T) {
	pg := pgtest.StartServer(t)
	ta := startApp(t, func(c *Config) { c.DatabaseURL = pg.URL })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, nodetestWithCancel(reg(key, "n1", "echo"), 2))
	// The key is cached before the stall.
	answerOne(t, ta, n, key, "echo", "completed")
	id := ta.submit(t, key, map[string]any{"task_type": "echo", "content": "stalled"})
	if got := n.Expect("task_assign").TaskID(); got != id {
		t.Fatalf("assign of %s, want %s", got, id)
	}

	pg.Stop()
	stalled := true
	defer func() {
		if stalled {
			pg.Cont()
		}
	}()
	n.Result(id, "completed", "answered during the stall")
	code, ecode, d := ta.timed(t, http.MethodPost, "/api/v1/tasks", key, map[string]any{"task_type": "echo", "content": "x"})
	if code != http.StatusServiceUnavailable || ecode != "store_unavailable" || d > 3*time.Second {
		t.Fatalf("submit during the stall: HTTP %d %q in %v, want 503 store_unavailable in < 3s", code, ecode, d)
	}
	for i := range 3 {
		start := time.Now()
		r := answerOne(t, ta, n, key, "echo", "completed")
		if took := time.Since(start); took > time.Second {
			t.Fatalf("request %d during the stall took %s (%d)", i, took, r.code)
		}
	}

	pg.Cont()
	stalled = false
	var v asyncView
	waitUntilFor(t, 30*time.Second, func() bool {
		code, got := ta.view(t, key, id, "?wait=5s")
		v = got
		return code == 200 && v.Status == "completed"
	})
	if v.Result == nil || *v.Result != "answered during the stall" || v.Attempts != 1 {
		t.Fatalf("after the stall the task is %+v", v)
	}
}

func waitUntilFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A drain lets a running async task finish (its node answers during the
// drain, and the end is written), and claims nothing new meanwhile.
func TestAsyncDrainFinishesRunningTasks(t *testing.T) {
	db := pgtest.SchemaURL(t, "asyncdrain")
	ta := startApp(t, func(c *Config) { c.DatabaseURL = db })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, nodetestWithCancel(reg(key, "n1", "echo"), 2))
	id := ta.submit(t, key, map[string]any{"task_type": "echo", "content": "last"})
	if got := n.Expect("task_assign").TaskID(); got != id {
		t.Fatalf("assign of %s, want %s", got, id)
	}
	stopped := async(func() struct{} { ta.stop(); return struct{}{} })
	waitUntil(t, func() bool { return ta.draining.Load() })
	later := store.AsyncTask{ID: "after-drain", AccountID: "acct", TaskType: "echo", Content: "x", Priority: 5, TTL: time.Hour}
	if err := ta.store.SubmitAsync(context.Background(), later); err != nil {
		t.Fatal(err)
	}
	n.Result(id, "completed", "done while draining")
	waitFor(t, stopped, 15*time.Second)

	st, err := store.Open(context.Background(), store.Options{DatabaseURL: db, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.AsyncTask(context.Background(), id)
	if err != nil || got.Status != store.AsyncCompleted || got.Result != "done while draining" {
		t.Fatalf("after the drain the task is %+v, %v", got, err)
	}
	if got, err := st.AsyncTask(context.Background(), "after-drain"); err != nil || got.Status != store.AsyncQueued {
		t.Errorf("a task queued during the drain is %+v, %v; want still queued (a draining instance claims nothing)", got, err)
	}
}
