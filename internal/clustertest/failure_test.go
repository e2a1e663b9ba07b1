package clustertest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// Invariants 4 and 3: kill -9 the instance that holds a node, and the
// request waiting on it at another instance fails with 502
// node_disconnected within 1.5 s; a request that another live instance's
// node is serving completes as if nothing happened. Default timings: the
// bar holds without tuning.
func TestKillOwnerFailsItsTasksFast(t *testing.T) { OnEachRedis(t, testKillOwnerFailsItsTasksFast) }

func testKillOwnerFailsItsTasksFast(t *testing.T, cfg Config) {
	c := New(t, cfg)
	key := c.Account("alice")
	a := c.Start("A")
	b := c.Start("B")
	cInst := c.Start("C")

	startedA, startedC := make(chan string, 1), make(chan string, 1)
	blocks := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if r, ok := probe(task); ok {
			return r, nil
		}
		signal(startedA, task.ID)
		select {
		case <-ctx.Done():
			return sdk.Result{}, ctx.Err()
		case <-time.After(10 * time.Second):
			return sdk.Result{Text: "on A: finished"}, nil
		}
	})
	slow := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if r, ok := probe(task); ok {
			return r, nil
		}
		signal(startedC, task.ID)
		select {
		case <-ctx.Done():
			return sdk.Result{}, ctx.Err()
		case <-time.After(1500 * time.Millisecond):
			return sdk.Result{Text: "on C: finished"}, nil
		}
	})
	na := RunNode(t, sdk.NodeConfig{URL: a.WS(), APIKey: key, Name: "on-a", Capabilities: []string{"type-a"}, Handler: blocks})
	nc := RunNode(t, sdk.NodeConfig{URL: cInst.WS(), APIKey: key, Name: "on-c", Capabilities: []string{"type-c"}, Handler: slow})
	na.WaitRegistered(t, 5*time.Second)
	nc.WaitRegistered(t, 5*time.Second)
	b.WaitNodes(3*time.Second, "both nodes", func(ns []NodeView) bool { return len(ns) == 2 })

	toA := requestAsync(t, b, key, "type-a", "x")
	toC := requestAsync(t, b, key, "type-c", "y")
	waitFor(t, startedA, 5*time.Second, "the handler on A's node")
	waitFor(t, startedC, 5*time.Second, "the handler on C's node")

	killed := time.Now()
	a.Kill()
	ra := waitFor(t, toA, 5*time.Second, "the request whose node was on A")
	took := ra.at.Sub(killed)
	if ra.err != nil || ra.Code != http.StatusBadGateway || ra.ErrorCode() != "node_disconnected" {
		t.Fatalf("request whose node was on A, after A was killed: %v; want HTTP 502 node_disconnected", ra)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("the 502 came %s after A was killed, want at most 1.5s", took)
	}
	t.Logf("502 node_disconnected %s after kill -9 of A", took.Round(time.Millisecond))

	rc := waitFor(t, toC, 5*time.Second, "the request served on C")
	if rc.err != nil || rc.Code != http.StatusOK || !strings.Contains(string(rc.Body), "on C: finished") {
		t.Fatalf("request served by C's node: %v; want 200 with its result", rc)
	}
}

// Invariant 5: kill -9 the instance where a request landed, and the
// instance that holds its node cancels the task on the node (task_cancel
// reaches the handler) within 2 s, freeing its slot.
func TestRequesterDeathCancelsOnNode(t *testing.T) { OnEachRedis(t, testRequesterDeathCancelsOnNode) }

func testRequesterDeathCancelsOnNode(t *testing.T, cfg Config) {
	c := New(t, cfg)
	key := c.Account("alice")
	a := c.Start("A")
	b := c.Start("B")

	started, cancelled := make(chan struct{}, 1), make(chan time.Time, 1)
	handler := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if r, ok := probe(task); ok {
			return r, nil
		}
		if task.Content != "block" {
			return sdk.Result{Text: "served: " + task.Content}, nil
		}
		signal(started, struct{}{})
		select {
		case <-ctx.Done():
			signal(cancelled, time.Now())
			return sdk.Result{}, ctx.Err()
		case <-time.After(10 * time.Second):
			return sdk.Result{Text: "never cancelled"}, nil
		}
	})
	// One slot: the request after the kill is served only if the slot was freed.
	n := RunNode(t, sdk.NodeConfig{URL: a.WS(), APIKey: key, Name: "n", Capabilities: []string{"work"}, MaxConcurrency: 1, Handler: handler})
	n.WaitRegistered(t, 5*time.Second)
	b.WaitNodes(3*time.Second, "the node", func(ns []NodeView) bool { return len(ns) == 1 })

	requestAsync(t, b, key, "work", "block") // its answer never comes: B dies
	waitFor(t, started, 5*time.Second, "the handler")
	killed := time.Now()
	b.Kill()
	select {
	case at := <-cancelled:
		t.Logf("the handler's context was cancelled %s after kill -9 of the requester", at.Sub(killed).Round(time.Millisecond))
	case <-time.After(2 * time.Second):
		t.Fatal("the handler's context was not cancelled within 2s of kill -9 of the requesting instance")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	r, err := a.Request(ctx, key, "work", "next")
	if err != nil || r.Code != http.StatusOK || !strings.Contains(string(r.Body), "served: next") {
		t.Fatalf("a request after the cancel (the node's one slot must be free): %v %+v", err, r)
	}
}
