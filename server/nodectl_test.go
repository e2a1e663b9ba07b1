package server

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// stateOf reads a node's state in ta's public listing ("" if unlisted).
func (ta *testApp) stateOf(t *testing.T, id string) string {
	t.Helper()
	state, _ := ta.viewOf(t, id)
	return state
}

// viewOf reads a node's state and reason in ta's public listing, which
// must show neither its account nor its instance.
func (ta *testApp) viewOf(t *testing.T, id string) (state, reason string) {
	t.Helper()
	code, b, _, err := ta.do(http.MethodGet, "/api/v1/nodes", "", nil)
	if err != nil || code != 200 {
		t.Fatalf("GET /api/v1/nodes: %d %v", code, err)
	}
	var list []struct {
		NodeID      string `json:"node_id"`
		State       string `json:"state"`
		StateReason string `json:"state_reason"`
		AccountID   string `json:"account_id"`
		Instance    string `json:"instance"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	for _, n := range list {
		if n.NodeID == id {
			if n.AccountID != "" || n.Instance != "" {
				t.Fatalf("the public listing shows a node's account %q or instance %q", n.AccountID, n.Instance)
			}
			return n.State, n.StateReason
		}
	}
	return "", ""
}

// The bar: a paused node gets no new task while others of its type
// do, and its running task completes; resumed, it gets tasks again.
func TestPausedNodeGetsNoNewTask(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.QueueTimeout = 10 * time.Second })
	key := ta.account(t, "alice", "")
	n1 := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "n1", "capabilities": []string{"echo"}, "max_concurrency": 2})
	running := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "running"})
	held := n1.Expect("task_assign").TaskID()
	n2 := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "n2", "capabilities": []string{"echo"}, "max_concurrency": 1})

	var v struct {
		State       string `json:"state"`
		StateReason string `json:"state_reason"`
	}
	if code, _ := ta.call(t, "POST", "/api/v1/nodes/"+n1.ID+"/pause", key, map[string]any{"reason": "new driver"}, &v); code != 200 || v.State != "paused" || v.StateReason != "new driver" {
		t.Fatalf("pause: %d %+v, want 200 paused with its reason", code, v)
	}
	if got := ta.stateOf(t, n1.ID); got != "paused" {
		t.Fatalf("listed as %q, want paused", got)
	}
	// n1 has a free slot but is paused: every new task goes to n2.
	for i := range 3 {
		ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "new"})
		m := n2.Expect("task_assign")
		n2.Result(m.TaskID(), "completed", "new")
		if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
			t.Fatalf("request %d: %d %s", i, r.code, r.body)
		}
	}
	n1.Result(held, "completed", "running")
	if r := waitFor(t, running, 3*time.Second); r.code != 200 {
		t.Fatalf("the paused node's running task: %d %s", r.code, r.body)
	}
	if code, _ := ta.call(t, "POST", "/api/v1/nodes/"+n1.ID+"/resume", key, nil, &v); code != 200 || v.State != "serving" {
		t.Fatalf("resume: %d %+v", code, v)
	}
	// Three at once fill the three slots: n1, serving again, takes two.
	var after []<-chan reply
	for range 3 {
		after = append(after, ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "after"}))
	}
	type placed struct {
		n  *wireNode
		id string
	}
	var all []placed
	for _, n := range []*wireNode{n1, n1, n2} { // answered only once all three are placed
		all = append(all, placed{n, n.Expect("task_assign").TaskID()})
	}
	for _, h := range all {
		h.n.Result(h.id, "completed", "x")
	}
	for _, ch := range after {
		if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
			t.Fatalf("after the resume: %d %s", r.code, r.body)
		}
	}
}

// Only the node's own account (or the admin token) may change its state;
// anyone else is told there is no such node. A drained idle node is closed
// with 1001.
func TestNodeControlWhoMayAndDrain(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.AdminToken = testAdmin })
	alice, bob := ta.account(t, "alice", ""), ta.account(t, "bob", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": alice, "name": "n", "capabilities": []string{"echo"}})
	var e apiErr
	if code, _ := ta.call(t, "POST", "/api/v1/nodes/"+n.ID+"/pause", bob, nil, &e); code != 404 || e.Error.Code != "node_not_found" {
		t.Fatalf("another account's pause: %d %+v, want 404 node_not_found", code, e)
	}
	if code, _ := ta.call(t, "POST", "/api/v1/nodes/"+n.ID+"/pause", "", nil, &e); code != 401 {
		t.Fatalf("no key: %d %+v, want 401", code, e)
	}
	if code, _ := ta.call(t, "POST", "/api/v1/nodes/"+n.ID+"/pause", alice, map[string]any{"reason": 5}, &e); code != 422 {
		t.Fatalf("a reason that is not a string: %d %+v, want 422", code, e)
	}
	if got := ta.stateOf(t, n.ID); got != "serving" {
		t.Fatalf("after refused pauses the node is %q, want serving", got)
	}
	var v struct{ State string }
	if code, _ := ta.call(t, "POST", "/api/v1/nodes/"+n.ID+"/drain", testAdmin, nil, &v); code != 200 || v.State != "draining" {
		t.Fatalf("drain with the admin token: %d %+v", code, v)
	}
	if code := n.WaitClosed(3 * time.Second); code != 1001 {
		t.Fatalf("the drained idle node was closed with %d, want 1001", code)
	}
}

// From another instance than the node's: the pause goes over the bus, and
// both instances stop sending the node tasks.
func TestPauseFromAnotherInstance(t *testing.T) {
	a, b := startPair(t, "nodectl", func(c *Config) { c.AdminToken, c.QueueTimeout = testAdmin, 300*time.Millisecond })
	key := a.account(t, "alice", "")
	n := connectNode(t, a.wsURL, map[string]any{"api_key": key, "name": "w", "capabilities": []string{"echo"}})
	b.waitListed(t, n.ID, 0, 0)
	code, body, _, err := b.do(http.MethodPost, "/api/v1/nodes/"+n.ID+"/pause", key, map[string]any{"reason": "maintenance"})
	if err != nil || code != 202 {
		t.Fatalf("pause on B: %d %s %v, want 202", code, body, err)
	}
	waitUntil(t, func() bool { return a.stateOf(t, n.ID) == "paused" && b.stateOf(t, n.ID) == "paused" })
	// Its only node paused, a request waits and then hears nodes_busy,
	// on either instance; the node is sent nothing.
	for _, ta := range []*testApp{a, b} {
		var e apiErr
		if code, _ := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "echo", "content": "x"}, &e); code != 503 || e.Error.Code != "nodes_busy" {
			t.Fatalf("a request with the only node paused: %d %+v, want 503 nodes_busy", code, e)
		}
	}
	if code, body, _, _ := b.do(http.MethodPost, "/api/v1/nodes/"+n.ID+"/resume", testAdmin, nil); code != 202 {
		t.Fatalf("resume on B with the admin token: %d %s", code, body)
	}
	waitUntil(t, func() bool { return b.stateOf(t, n.ID) == "serving" })
	ch := b.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	m := n.Expect("task_assign")
	n.Result(m.TaskID(), "completed", "x")
	if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
		t.Fatalf("after resume: %d %s", r.code, r.body)
	}
}
