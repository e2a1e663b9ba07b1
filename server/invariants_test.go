package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
)

// Invariant 2: only the assigned connection answers. A result from another
// connection, or for an unknown task, is dropped and counted; the real
// answer still gets through.
func TestInvariant2OnlyTheAssignedConnectionAnswers(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	a := connectNode(t, ta.wsURL, reg(key, "a", "echo"))
	foreign := connectNode(t, ta.wsURL, reg(key, "b", "other"))
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x", "stream": false})
	id := a.Expect("task_assign").Payload["task_id"].(string)
	dropped := func() float64 { return counterSum(t, ta, "switchyard_tasks_dropped_events_total") }
	before := dropped()
	foreign.MustSend("task_chunk", map[string]any{"task_id": id, "delta": "forged"})
	foreign.Result(id, "completed", "forged")
	foreign.Result("no-such-task", "completed", "?")
	a.MustSend("task_chunk", map[string]any{"task_id": "no-such-task", "delta": "?"})
	// Wait until the server has processed all four before answering for real.
	waitUntil(t, func() bool { return dropped()-before >= 4 })
	a.Result(id, "completed", "genuine")
	var res result
	r := waitFor(t, ch, 3*time.Second)
	r.decode(t, &res)
	if res.Result != "genuine" {
		t.Fatalf("answer %+v", res)
	}
	// A late chunk and a second result for a finished task are dropped too.
	a.MustSend("task_chunk", map[string]any{"task_id": id, "delta": "late"})
	a.Result(id, "completed", "again")
	waitUntil(t, func() bool { return dropped()-before >= 6 })
}

// Invariant 2 across a replacement: the replaced connection's answers are
// dropped even while its socket is still closing.
func TestInvariant2StaleConnectionIsIgnored(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	old := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	id := old.Expect("task_assign").Payload["task_id"].(string)
	connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	if r := waitFor(t, ch, 3*time.Second); r.code != 502 {
		t.Fatalf("task of the replaced connection: %d %s", r.code, r.body)
	}
	// The old socket may or may not accept the write; either way nothing may answer twice.
	b := fmt.Appendf(nil, `{"msg_type":"task_result","payload":{"task_id":%q,"status":"completed","result":"late"}}`, id)
	_ = old.Conn.Write(context.Background(), 1, b)
	var rec map[string]any
	waitUntil(t, func() bool {
		code, _ := ta.call(t, "GET", "/api/v1/tasks/"+id, key, nil, &rec)
		return code == 200 && rec["running"] == false
	})
	if rec["status"] != "error" || rec["error_code"] != "node_disconnected" {
		t.Fatalf("record %v", rec)
	}
}

// Invariant 3: exactly one outcome per request, whatever the nodes and
// clients do; nothing hangs past its deadline plus a second, and no
// tracker or forwarding entry outlives its task.
func TestInvariant3ExactlyOneOutcome(t *testing.T) {
	const timeout = 400 * time.Millisecond
	ta := startApp(t, func(c *Config) {
		c.TaskTimeout = timeout
		c.StreamMax = 2 * time.Second
		c.QueueTimeout = 2 * time.Second
	})
	key := ta.account(t, "alice", "")

	// Three nodes that each do something different with every task.
	var behaviours sync.Map // task id → what the node did
	var nodesWG sync.WaitGroup
	for i := 0; i < 3; i++ {
		n := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": fmt.Sprintf("n%d", i), "capabilities": []string{"mix"}, "max_concurrency": 50})
		nodesWG.Add(1)
		go func() {
			defer nodesWG.Done()
			for {
				var m nodetest.Msg
				select {
				case m = <-n.Msgs:
				case <-n.Closed:
					return
				}
				if m.MsgType != "task_assign" {
					continue
				}
				id := m.Payload["task_id"].(string)
				stream := m.Payload["stream"] == true
				switch b := rand.IntN(4); b {
				case 0:
					behaviours.Store(id, "complete")
					if stream {
						n.Send("task_chunk", map[string]any{"task_id": id, "delta": "x"})
					}
					n.Send("task_result", map[string]any{"task_id": id, "status": "completed", "result": "x"})
				case 1:
					behaviours.Store(id, "fail")
					n.Send("task_result", map[string]any{"task_id": id, "status": "failed", "result": "no"})
				case 2:
					behaviours.Store(id, "silent") // times out
				case 3:
					behaviours.Store(id, "twice")
					n.Send("task_result", map[string]any{"task_id": id, "status": "completed", "result": "1"})
					n.Send("task_result", map[string]any{"task_id": id, "status": "completed", "result": "2"})
				}
			}
		}()
	}

	const requests = 120
	var answered atomic.Int32
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < requests; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream := i%3 == 0
			if i%7 == 0 {
				// This client gives up early.
				var c2 context.CancelFunc
				ctx, c2 = context.WithTimeout(ctx, time.Duration(rand.IntN(200))*time.Millisecond)
				defer c2()
			}
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "POST", ta.url+"/api/v1/request",
				strings.NewReader(fmt.Sprintf(`{"task_type":"mix","content":"c%d","stream":%v}`, i, stream)))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			code := -1 // the client gave up
			if err == nil {
				b := make([]byte, 64<<10)
				n, rerr := readAll(resp, b)
				resp.Body.Close()
				code = resp.StatusCode
				if ctx.Err() != nil && rerr != nil && rerr.Error() != "EOF" {
					code = -1 // gave up while the stream was running
				}
				if stream && code == 200 && strings.Count(string(b[:n]), `"done":true`)+strings.Count(string(b[:n]), `"error":`) != 1 {
					t.Errorf("stream %d ended %d times: %q", i, strings.Count(string(b[:n]), "data:"), b[:n])
				}
			}
			if took := time.Since(start); took > timeout+2*time.Second+time.Second {
				t.Errorf("request %d took %s, past its deadline plus a second", i, took)
			}
			answered.Add(1)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if answered.Load() != requests {
		t.Fatalf("%d of %d requests answered", answered.Load(), requests)
	}
	t.Logf("answers by status: %v", codes)
	waitUntil(t, func() bool { return ta.engine.Requesting() == 0 && ta.engine.Forwarding() == 0 })
	// Every task is recorded exactly once.
	if err := ta.writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	counted := 0
	behaviours.Range(func(k, v any) bool {
		counted++
		rec, err := ta.store.Task(context.Background(), k.(string))
		if err != nil {
			t.Errorf("task %s (%s) not recorded: %v", k, v, err)
		} else if v == "silent" && rec.Status != "error" && rec.Status != "canceled" {
			t.Errorf("silent task %s recorded as %s", k, rec.Status)
		}
		return true
	})
	if counted == 0 {
		t.Fatal("no task reached a node")
	}
}

// Invariant 6: a client that goes away, or a deadline that passes, sends
// task_cancel to the node and frees its slot (a node that declared
// task_cancel; for one that did not, see TestCancelHeldForNodesWithoutTaskCancel).
func TestInvariant6CancelTravels(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.TaskTimeout = 300 * time.Millisecond })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, nodetest.WithCancel(map[string]any{"api_key": key, "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 1}))

	ctx, cancel := context.WithCancel(context.Background())
	done := async(func() error {
		req, _ := http.NewRequestWithContext(ctx, "POST", ta.url+"/api/v1/request", strings.NewReader(`{"task_type":"echo","content":"x"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		_, err := http.DefaultClient.Do(req)
		return err
	})
	id := n.Expect("task_assign").Payload["task_id"]
	cancel()
	waitFor(t, done, 3*time.Second)
	if m := n.Expect("task_cancel"); m.Payload["task_id"] != id || m.Payload["reason"] != "client gone" {
		t.Fatalf("cancel %v", m.Payload)
	}
	// The slot is free: the node (max_concurrency 1) takes the next task at once.
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "y"})
	m := n.Expect("task_assign")
	// Deadline: the node stays silent.
	if m2 := n.Expect("task_cancel"); m2.Payload["task_id"] != m.Payload["task_id"] || m2.Payload["reason"] != "deadline passed" {
		t.Fatalf("cancel %v", m2.Payload)
	}
	var e apiErr
	r := waitFor(t, ch, 3*time.Second)
	r.decode(t, &e)
	if r.code != 504 || e.Error.Code != "timeout" {
		t.Fatalf("%d %+v", r.code, e)
	}
	ch = ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "z"})
	n.Result(n.Expect("task_assign").Payload["task_id"].(string), "completed", "z")
	if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
		t.Fatalf("after the timeout: %d %s", r.code, r.body)
	}
}

// Invariant 7: a node never holds more tasks than its max_concurrency;
// requests beyond it wait for a slot rather than over-commit it.
func TestInvariant7NeverOverCommitted(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 2})
	const requests = 12
	var chans []<-chan reply
	for i := 0; i < requests; i++ {
		chans = append(chans, ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"}))
	}
	// Take tasks two at a time: with both slots held, no third may arrive.
	for round := 0; round < requests/2; round++ {
		a := n.Expect("task_assign")
		b := n.Expect("task_assign")
		select {
		case extra := <-n.Msgs:
			t.Fatalf("node at max_concurrency 2 received a third message %s %v", extra.MsgType, extra.Payload)
		case <-time.After(50 * time.Millisecond): // long enough for a wrongly dispatched task to arrive
		}
		n.Result(a.Payload["task_id"].(string), "completed", "x")
		n.Result(b.Payload["task_id"].(string), "completed", "x")
	}
	for _, ch := range chans {
		if r := waitFor(t, ch, 5*time.Second); r.code != 200 {
			t.Fatalf("%d %s", r.code, r.body)
		}
	}
}

// With every node full past the queue timeout, a request fails with 503
// nodes_busy rather than waiting forever.
func TestBusyNodesAnswer503(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.QueueTimeout = 200 * time.Millisecond })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 1})
	first := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	id := n.Expect("task_assign").Payload["task_id"].(string)
	var e apiErr
	code, h := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "echo", "content": "y"}, &e)
	if code != 503 || e.Error.Code != "nodes_busy" || h.Get("Retry-After") == "" {
		t.Fatalf("%d %+v %v", code, e, h)
	}
	n.Result(id, "completed", "x")
	waitFor(t, first, 3*time.Second)
}

func readAll(resp *http.Response, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := resp.Body.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// counterSum adds up every series of a counter in the app's registry.
func counterSum(t *testing.T, ta *testApp, name string) float64 {
	t.Helper()
	mfs, err := ta.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// waitUntil polls a condition that has no event to wait on (a counter, a
// table size), failing after 5s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gaugeValue reads a gauge of the app's registry (0 if absent).
func gaugeValue(t *testing.T, ta *testApp, name string) float64 {
	t.Helper()
	mfs, err := ta.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// Requests waiting for a busy node are served in the order they came, one
// woken per freed slot: before, every freed slot woke every waiter, which
// served them in no order and, with thousands waiting, spent an instance's
// CPU on picking.
func TestWaitingRequestsServedInOrder(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.QueueTimeout = 10 * time.Second })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 1})
	first := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "first"})
	held := n.Expect("task_assign").Payload["task_id"].(string)
	const waiting = 8
	replies := make([]<-chan reply, waiting)
	for i := range waiting {
		replies[i] = ta.requestAsync(key, map[string]any{"task_type": "echo", "content": fmt.Sprint(i)})
		waitUntil(t, func() bool { return gaugeValue(t, ta, "switchyard_tasks_waiting_for_slot") == float64(i+1) })
	}
	n.Result(held, "completed", "first")
	for i := range waiting {
		m := n.Expect("task_assign")
		if got := m.Payload["content"]; got != fmt.Sprint(i) {
			t.Fatalf("slot %d went to the request sent %vth, want the %dth (the oldest waiting)", i, got, i)
		}
		n.Result(m.TaskID(), "completed", fmt.Sprint(i))
	}
	waitFor(t, first, 3*time.Second)
	for i, ch := range replies {
		if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
			t.Fatalf("request %d: %d %s", i, r.code, r.body)
		}
	}
	if g := gaugeValue(t, ta, "switchyard_tasks_waiting_for_slot"); g != 0 {
		t.Fatalf("waiting_for_slot = %v after every request was served, want 0", g)
	}
}

// A slot freed on a node goes to a waiting request that node can take,
// even when the request first in the queue demands labels it lacks: that
// request keeps its place for a node that has them, and does not hold up
// the one behind it until it is served or its queue timeout passes.
func TestWaitingRequestNotHeldByOneTheFreedNodeCannotServe(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.QueueTimeout = 10 * time.Second })
	key := ta.account(t, "alice", "")
	node := func(gpu string) *wireNode {
		r := reg(key, gpu, "echo")
		r["max_concurrency"], r["labels"] = 1, map[string]string{"gpu": gpu}
		return connectNode(t, ta.wsURL, r)
	}
	a100, t4 := node("a100"), node("t4")
	on := func(gpu, content string) map[string]any {
		return map[string]any{"task_type": "echo", "content": content, "node_labels": map[string]string{"gpu": gpu}}
	}
	onA100 := ta.requestAsync(key, on("a100", "on a100"))
	heldA100 := a100.Expect("task_assign").TaskID()
	onT4 := ta.requestAsync(key, on("t4", "on t4"))
	heldT4 := t4.Expect("task_assign").TaskID()

	wantsA100 := ta.requestAsync(key, on("a100", "wants a100"))
	waitUntil(t, func() bool { return gaugeValue(t, ta, "switchyard_tasks_waiting_for_slot") == 1 })
	anyNode := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "any"})
	waitUntil(t, func() bool { return gaugeValue(t, ta, "switchyard_tasks_waiting_for_slot") == 2 })

	// The t4 node frees its slot while the a100 node stays busy.
	t4.Result(heldT4, "completed", "on t4")
	if r := waitFor(t, onT4, 3*time.Second); r.code != 200 {
		t.Fatalf("on t4: %d %s", r.code, r.body)
	}
	m := t4.Expect("task_assign")
	if got := m.Payload["content"]; got != "any" {
		t.Fatalf("the t4 node's slot went to %v, want the request any node can take", got)
	}
	t4.Result(m.TaskID(), "completed", "any")
	if r := waitFor(t, anyNode, 3*time.Second); r.code != 200 {
		t.Fatalf("any: %d %s", r.code, r.body)
	}

	// The a100 request kept its place: the a100 node's slot is its.
	a100.Result(heldA100, "completed", "on a100")
	m = a100.Expect("task_assign")
	if got := m.Payload["content"]; got != "wants a100" {
		t.Fatalf("the a100 node's slot went to %v, want the waiting a100 request", got)
	}
	a100.Result(m.TaskID(), "completed", "wants a100")
	for _, ch := range []<-chan reply{onA100, wantsA100} {
		if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
			t.Fatalf("%d %s", r.code, r.body)
		}
	}
}
