package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// GemmaNet's SDK cannot parse task_cancel (it logs "Failed to parse
// message" for each), so a node that did not declare "task_cancel" in
// node_register's features is never sent one. It runs a cancelled task to
// its end, so its slot stays taken until its answer comes (invariant 7:
// the instance must not give it another task meanwhile), and that answer
// is discarded, neither an error to the node nor a dropped event. The
// client disconnects mid-task, from a plain request and from a stream.
func TestCancelHeldForNodesWithoutTaskCancel(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "stream"}[stream], func(t *testing.T) {
			ta := startApp(t, nil)
			key := ta.account(t, "alice", "")
			// What GemmaNet's SDK registers with, plus one slot.
			n := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "gemmanet", "capabilities": []string{"echo"}, "max_concurrency": 1})

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var first string
			if stream {
				s, code := ta.stream(t, ctx, key, map[string]any{"task_type": "echo", "content": "x"})
				if code != 200 {
					t.Fatalf("stream: %d", code)
				}
				first = n.Expect("task_assign").TaskID()
				n.Chunk(first, "a")
				if ev := s.next(t); ev["delta"] != "a" {
					t.Fatalf("event %v", ev)
				}
				cancel() // the client goes away mid-stream
			} else {
				done := plainAsync(ctx, ta, key)
				first = n.Expect("task_assign").TaskID()
				cancel() // the client goes away mid-task
				waitFor(t, done, 3*time.Second)
			}
			ta.waitHolding(t, 1)
			if got := ta.listed(t, n.ID); !got.hasLoad(1, 1) {
				t.Fatalf("a cancelled task the node still runs: %v, want its one slot in use (load 1)", got)
			}

			// A second request waits for the slot.
			second := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "y"})
			waitUntil(t, func() bool { return ta.engine.Requesting() == 1 })
			if stream {
				n.Chunk(first, "b") // still streaming, unaware: discarded
			}
			n.Result(first, "completed", "too late")
			// Messages to a node go in order: a task_cancel for the first task,
			// or an error about its answer, would come before this.
			m := n.Recv(5 * time.Second)
			if m.MsgType != "task_assign" || m.Payload["content"] != "y" {
				t.Fatalf("after its late answer the node got %s %v, want the waiting request's task_assign", m.MsgType, m.Payload)
			}
			n.Result(m.TaskID(), "completed", "y")
			var res result
			r := waitFor(t, second, 3*time.Second)
			r.decode(t, &res)
			if r.code != 200 || res.Result != "y" {
				t.Fatalf("the waiting request: %d %s", r.code, r.body)
			}
			if got := counterSum(t, ta, "switchyard_tasks_dropped_events_total"); got != 0 {
				t.Fatalf("%v events dropped: the late answer (or chunk) counted as a stray, want none", got)
			}
			if got := counterSum(t, ta, "switchyard_tasks_cancel_holds_ended_total"); got != 1 || ta.engine.Holding() != 0 {
				t.Fatalf("holds ended %v, holding %d; want 1 and 0", got, ta.engine.Holding())
			}
		})
	}
}

// A node that never answers a cancelled task (it hung, say) does not
// lose the slot for good: the hold ends when the task's timeout passes.
func TestCancelHoldEndsAtTheTaskTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ta := startApp(t, func(c *Config) { c.TaskTimeout = timeout })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "gemmanet", "capabilities": []string{"echo"}, "max_concurrency": 1})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	done := plainAsync(ctx, ta, key)
	n.Expect("task_assign")
	cancel()
	waitFor(t, done, 3*time.Second)
	ta.waitHolding(t, 1)
	if got := ta.listed(t, n.ID); !got.hasLoad(1, 1) {
		t.Fatalf("held: %v, want load 1", got)
	}
	// The node stays silent.
	ta.waitHolding(t, 0)
	if took := time.Since(start); took < timeout {
		t.Fatalf("the hold ended after %s, before the task timeout (%s)", took, timeout)
	}
	if got := ta.listed(t, n.ID); !got.hasLoad(0, 0) {
		t.Fatalf("after the timeout: %v, want load 0", got)
	}
	// Still nothing was sent to the node: the next message is the next task.
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "y"})
	m := n.Recv(5 * time.Second)
	if m.MsgType != "task_assign" || m.Payload["content"] != "y" {
		t.Fatalf("the node got %s %v, want the next task_assign", m.MsgType, m.Payload)
	}
	n.Result(m.TaskID(), "completed", "y")
	if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
		t.Fatalf("after the hold: %d %s", r.code, r.body)
	}
}

// plainAsync sends a plain echo request under ctx from a goroutine; its
// channel gets the client's error (context.Canceled once ctx ends).
func plainAsync(ctx context.Context, ta *testApp, key string) <-chan error {
	return async(func() error {
		req, _ := http.NewRequestWithContext(ctx, "POST", ta.url+"/api/v1/request", strings.NewReader(`{"task_type":"echo","content":"x"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}

// waitHolding waits until the owner holds n cancelled tasks for their
// nodes' answers: it has taken the client's cancel (a gauge, no event to
// wait on from here).
func (ta *testApp) waitHolding(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for ta.engine.Holding() != n {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s the instance holds %d cancelled tasks' slots, want %d", ta.engine.Holding(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
