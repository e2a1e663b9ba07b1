package server

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricValue reads one metric from ta's /metrics: name, or name{labels}
// as exposed; 0 when it is absent.
func metricValue(t *testing.T, ta *testApp, name string) float64 {
	t.Helper()
	_, body, _, err := ta.do("GET", "/metrics", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	return 0 // a counter with labels is absent until first counted
}

// A node failing several tasks in a row, for different
// accounts, is quarantined with a reason; one account alone cannot do it, a
// completed task ends the run, and the cool-off lets it serve again.
func TestFailingNodeIsQuarantined(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.QuarantineAfter, c.QuarantineCoolOff = 3, time.Second })
	owner := ta.account(t, "owner", "")
	alice, bob := ta.account(t, "alice", ""), ta.account(t, "bob", "")
	bad := connectNode(t, ta.wsURL, map[string]any{"api_key": owner, "name": "bad", "capabilities": []string{"echo"}, "max_concurrency": 1})

	// Four failures from one account: still serving.
	for range 4 {
		answerOne(t, ta, bad, alice, "echo", "failed")
	}
	if st, _ := ta.viewOf(t, bad.ID); st != "serving" {
		t.Fatalf("after one account's failures the node is %q, want serving", st)
	}
	// A completed task ends the run: bob's failure and two more are only three
	// since it, and two accounts, so the third of them quarantines the node.
	answerOne(t, ta, bad, bob, "echo", "completed")
	answerOne(t, ta, bad, bob, "echo", "failed")
	answerOne(t, ta, bad, alice, "echo", "failed")
	if st, _ := ta.viewOf(t, bad.ID); st != "serving" {
		t.Fatalf("two failures since a completed task: %q, want serving", st)
	}
	answerOne(t, ta, bad, alice, "echo", "failed")
	st, reason := ta.viewOf(t, bad.ID)
	if st != "quarantined" || !strings.Contains(reason, "quarantined: 3 tasks in a row failed") {
		t.Fatalf("after 3 failures for 2 accounts: %q %q, want quarantined and the quarantine's reason", st, reason)
	}

	// An autoscaler sees no free slot: the node takes no new task.
	var caps struct {
		Items []struct {
			TaskType   string `json:"task_type"`
			SlotsTotal int    `json:"slots_total"`
			SlotsFree  int    `json:"slots_free"`
		} `json:"capabilities"`
	}
	if code, _ := ta.call(t, "GET", "/api/v1/capabilities", "", nil, &caps); code != 200 || len(caps.Items) != 1 ||
		caps.Items[0].SlotsTotal != 1 || caps.Items[0].SlotsFree != 0 {
		t.Fatalf("capabilities with the only node quarantined: %d %+v, want 1 slot, 0 free", code, caps)
	}

	// Quarantined, it gets no task: another node of the type does.
	good := connectNode(t, ta.wsURL, map[string]any{"api_key": owner, "name": "good", "capabilities": []string{"echo"}, "max_concurrency": 1})
	answerOne(t, ta, good, bob, "echo", "completed")
	select {
	case m := <-bad.Msgs:
		t.Fatalf("the quarantined node got %s", m.MsgType)
	default:
	}

	// The cool-off (1 s) passes: it serves again, by itself.
	waitUntil(t, func() bool { st, _ := ta.viewOf(t, bad.ID); return st == "serving" })
	if m := metricValue(t, ta, `switchyard_nodes_quarantine_ends_total{outcome="resumed"}`); m != 1 {
		t.Fatalf("quarantine_ends_total = %v, want 1", m)
	}
}

// An operator's resume ends a quarantine at once, and an operator's pause
// during one is not undone by the cool-off.
func TestQuarantineYieldsToOperators(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.QuarantineAfter, c.QuarantineCoolOff = 2, time.Second })
	owner := ta.account(t, "owner", "")
	alice, bob := ta.account(t, "alice", ""), ta.account(t, "bob", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": owner, "name": "n", "capabilities": []string{"echo"}, "max_concurrency": 1})
	quarantine := func() {
		t.Helper()
		answerOne(t, ta, n, alice, "echo", "failed")
		answerOne(t, ta, n, bob, "echo", "failed")
		if st, _ := ta.viewOf(t, n.ID); st != "quarantined" {
			t.Fatalf("after 2 failures for 2 accounts: %q, want quarantined", st)
		}
	}
	quarantine()
	var v struct {
		State string `json:"state"`
	}
	if code, _ := ta.call(t, "POST", "/api/v1/nodes/"+n.ID+"/resume", owner, nil, &v); code != 200 || v.State != "serving" {
		t.Fatalf("resume of a quarantined node: %d %+v", code, v)
	}
	quarantine()
	if code, _ := ta.call(t, "POST", "/api/v1/nodes/"+n.ID+"/pause", owner, map[string]any{"reason": "looking into it"}, &v); code != 200 || v.State != "paused" {
		t.Fatalf("pause of a quarantined node: %d %+v", code, v)
	}
	// The second quarantine's cool-off ends, finds the operator's pause,
	// and leaves it (the first's timer was stopped when the second began).
	waitUntil(t, func() bool {
		return metricValue(t, ta, `switchyard_nodes_quarantine_ends_total{outcome="overridden"}`) == 1
	})
	if st, reason := ta.viewOf(t, n.ID); st != "paused" || reason != "looking into it" {
		t.Fatalf("after the cool-off: %q %q, want the operator's pause", st, reason)
	}
}

// Across instances: the requests come in on B, the node is on A; the
// accounts travel with each assign, and both instances see the node
// quarantined.
func TestQuarantineAcrossInstances(t *testing.T) {
	a, b := startPair(t, "quarantine", func(c *Config) { c.QuarantineAfter, c.QuarantineCoolOff = 2, time.Minute })
	owner := a.account(t, "owner", "")
	alice, bob := a.account(t, "alice", ""), a.account(t, "bob", "")
	n := connectNode(t, a.wsURL, map[string]any{"api_key": owner, "name": "n", "capabilities": []string{"echo"}, "max_concurrency": 1})
	b.waitListed(t, n.ID, 0, 0)
	answerOne(t, b, n, alice, "echo", "failed")
	answerOne(t, b, n, alice, "echo", "failed")
	if st, _ := a.viewOf(t, n.ID); st != "serving" {
		t.Fatalf("two failures of one account, sent from B: %q, want serving", st)
	}
	answerOne(t, b, n, bob, "echo", "failed")
	waitUntil(t, func() bool {
		sa, _ := a.viewOf(t, n.ID)
		sb, reason := b.viewOf(t, n.ID)
		return sa == "quarantined" && sb == "quarantined" && strings.HasPrefix(reason, "quarantined")
	})
}
