package server

import (
	"testing"
	"time"
)

// waitingFor is how many requests wait here for a slot of taskType.
func (ta *testApp) waitingFor(taskType string) int { return ta.hub.Waiting()[taskType].N }

// The fairness bar: account X with 200 requests waiting and Y with
// 5, on one busy node: Y's five are served within the first ten. A
// request of a higher priority goes before all of them.
func TestWaitingAccountsTakeTurns(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.QueueTimeout, c.MaxConnsPerIP = 30*time.Second, -1 })
	owner := ta.account(t, "owner", "")
	x, y := ta.account(t, "x", ""), ta.account(t, "y", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": owner, "name": "n", "capabilities": []string{"echo"}, "max_concurrency": 1})

	first := ta.requestAsync(x, map[string]any{"task_type": "echo", "content": "X"})
	busy := n.Expect("task_assign").TaskID()
	var replies []<-chan reply
	for range 200 {
		replies = append(replies, ta.requestAsync(x, map[string]any{"task_type": "echo", "content": "X"}))
	}
	waitUntil(t, func() bool { return ta.waitingFor("echo") == 200 })
	for range 5 {
		replies = append(replies, ta.requestAsync(y, map[string]any{"task_type": "echo", "content": "Y"}))
	}
	waitUntil(t, func() bool { return ta.waitingFor("echo") == 205 })
	replies = append(replies, ta.requestAsync(x, map[string]any{"task_type": "echo", "content": "urgent", "priority": 9}))
	waitUntil(t, func() bool { return ta.waitingFor("echo") == 206 })

	n.Result(busy, "completed", "X")
	waitFor(t, first, 5*time.Second)
	var order []string
	for range 206 {
		m := n.Expect("task_assign")
		content, _ := m.Payload["content"].(string)
		order = append(order, content)
		n.Result(m.TaskID(), "completed", content)
	}
	for i, ch := range replies {
		if r := waitFor(t, ch, 10*time.Second); r.code != 200 {
			t.Fatalf("request %d: %d %s", i, r.code, r.body)
		}
	}
	if order[0] != "urgent" {
		t.Fatalf("the priority 9 request was served %q first, want it before the others (order %v)", order[0], order[:12])
	}
	ys := 0
	for _, c := range order[1:11] {
		if c == "Y" {
			ys++
		}
	}
	if ys != 5 {
		t.Fatalf("Y's requests among the first ten served after the urgent one: %d, want 5 (order %v)", ys, order[:12])
	}
}

// priority is checked: an integer from 0 to 9.
func TestPriorityIsValidated(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	for _, p := range []any{-1, 10, "high", 2.5} {
		var e apiErr
		if code, _ := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "echo", "content": "x", "priority": p}, &e); code != 422 || e.Error.Code != "invalid_request" {
			t.Fatalf("priority %v: %d %+v, want 422 invalid_request", p, code, e)
		}
	}
}
