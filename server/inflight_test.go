package server

import (
	"strings"
	"testing"
	"time"
)

// --max-inflight-per-key caps one key's requests running or
// waiting; one more is 429 with Retry-After at once, another key is not
// touched, and a place frees when a request ends.
func TestInflightCapPerKey(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.MaxInflightPerKey, c.QueueTimeout = 2, 20*time.Second })
	owner := ta.account(t, "owner", "")
	alice, bob := ta.account(t, "alice", ""), ta.account(t, "bob", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": owner, "name": "n", "capabilities": []string{"echo"}, "max_concurrency": 1})
	running := ta.requestAsync(alice, map[string]any{"task_type": "echo", "content": "a1"})
	first := n.Expect("task_assign").TaskID()
	waiting := ta.requestAsync(alice, map[string]any{"task_type": "echo", "content": "a2"})
	waitUntil(t, func() bool { return ta.waitingFor("echo") == 1 })

	code, body, hdr, err := ta.do("POST", "/api/v1/request", alice, map[string]any{"task_type": "echo", "content": "a3"})
	if err != nil || code != 429 || hdr.Get("Retry-After") != "1" {
		t.Fatalf("a third in flight: %d %s (Retry-After %q) %v, want 429 with Retry-After 1", code, body, hdr.Get("Retry-After"), err)
	}
	var e apiErr
	if code, _ := ta.call(t, "POST", "/v1/chat/completions", alice, map[string]any{"model": "echo", "messages": []map[string]string{{"role": "user", "content": "x"}}}, &e); code != 429 || e.Error.Code != "rate_limit_exceeded" || !strings.Contains(e.Error.Message, "in flight") {
		// OpenAI's clients know 429 as rate_limit_exceeded (openai.go).
		t.Fatalf("chat completions over the cap: %d %+v, want 429 rate_limit_exceeded, saying why", code, e)
	}
	other := ta.requestAsync(bob, map[string]any{"task_type": "echo", "content": "b1"})
	waitUntil(t, func() bool { return ta.waitingFor("echo") == 2 })

	n.Result(first, "completed", "a1")
	if r := waitFor(t, running, 3*time.Second); r.code != 200 {
		t.Fatalf("the first: %d %s", r.code, r.body)
	}
	for range 2 {
		m := n.Expect("task_assign")
		n.Result(m.TaskID(), "completed", "x")
	}
	for _, ch := range []<-chan reply{waiting, other} {
		if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
			t.Fatalf("a waiting request: %d %s", r.code, r.body)
		}
	}
	// Alice's places are free again.
	answerOne(t, ta, n, alice, "echo", "completed")
}

// The cap is the cluster's: a key's place taken on A counts on B.
func TestInflightCapAcrossInstances(t *testing.T) {
	a, b := startPair(t, "inflight", func(c *Config) { c.MaxInflightPerKey = 1 })
	owner, alice := a.account(t, "owner", ""), a.account(t, "alice", "")
	n := connectNode(t, a.wsURL, map[string]any{"api_key": owner, "name": "n", "capabilities": []string{"echo"}, "max_concurrency": 2})
	b.waitListed(t, n.ID, 0, 0)
	running := a.requestAsync(alice, map[string]any{"task_type": "echo", "content": "on A"})
	id := n.Expect("task_assign").TaskID()
	var e apiErr
	if code, _ := b.call(t, "POST", "/api/v1/request", alice, map[string]any{"task_type": "echo", "content": "on B"}, &e); code != 429 || e.Error.Code != "too_many_in_flight" {
		t.Fatalf("a second on B while one runs on A: %d %+v, want 429 too_many_in_flight", code, e)
	}
	n.Result(id, "completed", "on A")
	if r := waitFor(t, running, 3*time.Second); r.code != 200 {
		t.Fatalf("on A: %d %s", r.code, r.body)
	}
	answerOne(t, b, n, alice, "echo", "completed") // on B, after A's ended
}
