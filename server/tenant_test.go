package server

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The bar, end to end: nothing one account sends gets another
// account's node out of routing (invariant 15). Account A, the attacker,
// sends 12 requests with params the node cannot decode (refused at the
// door, 422: the node never sees them), 12 the node says it cannot run
// (502 task_rejected, not held against it), and 12 that fail after 10.5 s
// each (as a dropped assignment would, at its timeout): failures of the
// node, enough to take its score to 30, under the suspension bar of 35,
// but all from one account. B's node then still serves B. The rule is live,
// not absent: one such failure from each of two more accounts suspends it.
func TestOneAccountCannotSuspendAnothersNode(t *testing.T) {
	if testing.Short() {
		t.Skip("two rounds of 10 s failures")
	}
	ta := startApp(t, func(c *Config) { c.TaskTimeout = 20 * time.Second })
	attacker, victim := ta.account(t, "mallory", ""), ta.account(t, "bob", "")
	r := reg(victim, "bobs-node", "echo")
	r["max_concurrency"] = 16
	n := connectNode(t, ta.wsURL, r)
	nodeID := n.ID

	undecodable := []byte(`{"task_type":"echo","content":"x","params":{"n":1e999999}}`)
	for i := range 12 {
		if code, body, _, _ := ta.do(http.MethodPost, "/api/v1/request", attacker, undecodable); code != http.StatusUnprocessableEntity {
			t.Fatalf("undecodable params %d: %d %s, want 422", i, code, body)
		}
	}
	for i := range 12 {
		ch := ta.requestAsync(attacker, map[string]any{"task_type": "echo", "content": "x"})
		n.Result(n.Expect("task_assign").TaskID(), "rejected", "cannot read this assignment")
		if r := waitFor(t, ch, 3*time.Second); r.code != http.StatusBadGateway {
			t.Fatalf("rejected %d: %d %s, want 502", i, r.code, r.body)
		}
	}
	// Slow failures, all at once (the node has 16 slots): each is 10.5 s
	// of the node's time by the coordinator's clock, which is what the
	// score's speed term reads.
	failSlowly := func(keys ...string) {
		t.Helper()
		var chans []<-chan reply
		var ids []string
		for _, key := range keys {
			chans = append(chans, ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"}))
			ids = append(ids, n.Expect("task_assign").TaskID())
		}
		time.Sleep(10500 * time.Millisecond) // the handler's time: what is measured
		for _, id := range ids {
			n.MustSend("task_result", map[string]any{"task_id": id, "status": "failed", "result": "handler crashed"})
		}
		for i, ch := range chans {
			if r := waitFor(t, ch, 3*time.Second); r.code != http.StatusOK || !strings.Contains(string(r.body), `"failed"`) {
				t.Fatalf("failing %d: %d %s, want 200 status failed", i, r.code, r.body)
			}
		}
	}
	var twelve []string
	for range 12 {
		twelve = append(twelve, attacker)
	}
	failSlowly(twelve...)

	var rep map[string]any
	ta.call(t, http.MethodGet, "/api/v1/reputation/"+nodeID, "", nil, &rep)
	if score, _ := rep["score"].(float64); score >= 35 {
		t.Fatalf("score %v after 12 slow failures: this test needs it under the suspension bar (35) to mean anything", score)
	}
	ch := ta.requestAsync(victim, map[string]any{"task_type": "echo", "content": "mine"})
	select {
	case m := <-n.Msgs:
		n.Result(m.TaskID(), "completed", "done")
	case r := <-ch:
		t.Fatalf("after one account's 36 bad requests, the victim's own request got %d %s: its node is out of routing", r.code, r.body)
	case <-time.After(5 * time.Second):
		t.Fatal("the victim's request reached neither its node nor an answer")
	}
	if r := waitFor(t, ch, 3*time.Second); r.code != http.StatusOK {
		t.Fatalf("after one account's 36 bad requests, the victim's own request: %d %s, want 200 (its node still serving)", r.code, r.body)
	}

	failSlowly(ta.account(t, "c1", ""), ta.account(t, "c2", ""))
	code, body, _, _ := ta.do(http.MethodPost, "/api/v1/request", victim, map[string]any{"task_type": "echo", "content": "x"})
	if code != http.StatusNotFound {
		ta.call(t, http.MethodGet, "/api/v1/reputation/"+nodeID, "", nil, &rep)
		t.Fatalf("after failures from three accounts (score %v) the node still takes tasks: %d %s; the rule the first half relies on is not live",
			rep["score"], code, body)
	}
}
