package server

import (
	"fmt"
	"testing"
	"time"
)

// listedNode is a node as GET /api/v1/nodes shows it, with the fields
// GemmaNet's NodeInfo reads beside ours.
type listedNode struct {
	NodeID         string   `json:"node_id"`
	Online         *bool    `json:"online"` // a pointer: absent must not read as false
	Load           *float64 `json:"load"`
	ActiveTasks    int      `json:"active_tasks"`
	MaxConcurrency int      `json:"max_concurrency"`
}

// listed returns node id's entry in ta's GET /api/v1/nodes, or nil.
func (ta *testApp) listed(t *testing.T, id string) *listedNode {
	t.Helper()
	var list []listedNode
	if code, _ := ta.call(t, "GET", "/api/v1/nodes", "", nil, &list); code != 200 {
		t.Fatalf("GET /api/v1/nodes: %d", code)
	}
	for i := range list {
		if list[i].NodeID == id {
			return &list[i]
		}
	}
	return nil
}

// hasLoad reports whether the entry is online with load (exactly: a
// fraction of small integers) and active tasks in use.
func (n *listedNode) hasLoad(load float64, active int) bool {
	return n != nil && n.Online != nil && *n.Online && n.Load != nil && *n.Load == load && n.ActiveTasks == active
}

// waitListed polls ta's listing until node id shows load and active tasks
// (the listing of another instance's node changes when its change feed
// is applied, on a goroutine of its own: nothing to wait on from here).
func (ta *testApp) waitListed(t *testing.T, id string, load float64, active int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := ta.listed(t, id)
		if got.hasLoad(load, active) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s the listing shows %v, want online true, load %v, active %d", got, load, active)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (n *listedNode) String() string {
	if n == nil {
		return "not listed"
	}
	online, load := "absent", "absent"
	if n.Online != nil {
		online = fmt.Sprint(*n.Online)
	}
	if n.Load != nil {
		load = fmt.Sprint(*n.Load)
	}
	return fmt.Sprintf("online %s, load %s, active_tasks %d of %d", online, load, n.ActiveTasks, n.MaxConcurrency)
}

// GemmaNet's NodeInfo reads online and load (defaulting load to 0.0): a
// busy node must show its load, the fraction of its slots in use, while
// its tasks run, and 0 again once they end.
func TestNodeListShowsLoadAndOnline(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 2})
	if got := ta.listed(t, n.ID); !got.hasLoad(0, 0) {
		t.Fatalf("idle node: %v, want online true, load 0", got)
	}

	first := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "a"})
	a := n.Expect("task_assign").TaskID()
	// The slot is taken before task_assign is sent: the listing shows it now.
	if got := ta.listed(t, n.ID); !got.hasLoad(0.5, 1) {
		t.Fatalf("one task of 2 slots running: %v, want load 0.5, active 1", got)
	}
	second := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "b"})
	b := n.Expect("task_assign").TaskID()
	if got := ta.listed(t, n.ID); !got.hasLoad(1, 2) {
		t.Fatalf("two tasks of 2 slots running: %v, want load 1, active 2", got)
	}

	n.Result(a, "completed", "a")
	n.Result(b, "completed", "b")
	for _, ch := range []<-chan reply{first, second} {
		if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
			t.Fatalf("request: %d %s", r.code, r.body)
		}
	}
	// The owner frees the slot before it answers the requester.
	if got := ta.listed(t, n.ID); !got.hasLoad(0, 0) {
		t.Fatalf("after both results: %v, want load 0", got)
	}
}

// The listing is the cluster's: a node held by instance A shows its real
// load on instance B, from the free slots in A's directory entry.
func TestNodeListShowsLoadAcrossInstances(t *testing.T) {
	a, b := startPair(t, "list", nil)
	key := a.account(t, "alice", "")
	n := connectNode(t, a.wsURL, map[string]any{"api_key": key, "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 4})
	// node_registered comes once the arrival is published (invariant 11), but
	// B applies the change feed on its own goroutine.
	b.waitListed(t, n.ID, 0, 0)

	// Requested on B, so both instances hear of the task; the load B shows
	// is still what A, the owner, wrote.
	ch := b.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	id := n.Expect("task_assign").TaskID()
	if got := a.listed(t, n.ID); !got.hasLoad(0.25, 1) {
		t.Fatalf("on A, the owner: %v, want load 0.25, active 1", got)
	}
	b.waitListed(t, n.ID, 0.25, 1)

	n.Result(id, "completed", "x")
	if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
		t.Fatalf("request: %d %s", r.code, r.body)
	}
	b.waitListed(t, n.ID, 0, 0)
}
