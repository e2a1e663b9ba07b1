package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
)

func TestRequestBodyErrors(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	cases := []struct {
		body any
		code int
		msg  string
	}{
		{`not json`, 422, "must be a JSON object"},
		{`{"task_type": }`, 422, "not valid JSON"},
		{`[1]`, 422, "must be a JSON object"},
		{map[string]any{"content": "x"}, 422, "task_type is required"},
		{map[string]any{"task_type": "echo"}, 422, "content is required"},
		{map[string]any{"task_type": "", "content": "x"}, 422, "task_type must be 1-64"},
		{map[string]any{"task_type": strings.Repeat("t", 65), "content": "x"}, 422, "task_type must be 1-64"},
		{map[string]any{"task_type": "echo\x00", "content": "x"}, 422, "task_type must not contain control characters"},
		{map[string]any{"task_type": "ec\nho", "content": "x"}, 422, "task_type must not contain control characters"},
		{map[string]any{"task_type": "echo", "content": strings.Repeat("é", 200_001)}, 422, "content must be at most 200000"},
		{map[string]any{"task_type": "echo", "content": "x", "params": []int{1}}, 422, "params must be an object"},
		{map[string]any{"task_type": "echo", "content": "x", "params": map[string]any{"content": 1}}, 422, `params key "content"`},
		{map[string]any{"task_type": "echo", "content": "x", "params": map[string]any{"1abc": 1}}, 422, "must be an identifier"},
		{map[string]any{"task_type": "echo", "content": "x", "params": map[string]any{"a": map[string]any{"b": map[string]any{"c": map[string]any{"d": map[string]any{}}}}}}, 422, "nest deeper than 4"},
		{map[string]any{"task_type": "echo", "content": "x", "params": map[string]any{"s": strings.Repeat("x", 8193)}}, 422, "at most 8192 characters"},
		{map[string]any{"task_type": "echo", "content": "x", "trust": "gold"}, 422, `trust must be "any" or "official"`},
		{map[string]any{"task_type": "echo", "content": 5}, 422, "content has the wrong type"},
	}
	for _, c := range cases {
		var e apiErr
		code, _ := ta.call(t, "POST", "/api/v1/request", key, c.body, &e)
		if code != c.code || e.Error.Code != "invalid_request" || !strings.Contains(e.Error.Message, c.msg) || e.Detail != e.Error.Message {
			t.Errorf("body %.80v: HTTP %d %+v; want %d with %q", c.body, code, e, c.code, c.msg)
		}
	}
	many := map[string]any{}
	for i := 0; i < 33; i++ {
		many["k"+strings.Repeat("x", i)] = i
	}
	var e apiErr
	if code, _ := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "echo", "content": "x", "params": many}, &e); code != 422 || !strings.Contains(e.Error.Message, "at most 32 keys") {
		t.Errorf("33 params: %d %+v", code, e)
	}
}

func TestBodyOver2MBIs413(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	big := []byte(`{"task_type":"echo","content":"` + strings.Repeat("x", 2_000_000) + `"}`)
	var e apiErr
	if code, _ := ta.call(t, "POST", "/api/v1/request", key, big, &e); code != 413 || e.Error.Code != "payload_too_large" {
		t.Fatalf("Content-Length over the limit: %d %+v", code, e)
	}
	// Without a Content-Length (chunked), the limit still holds.
	req, _ := http.NewRequest("POST", ta.url+"/api/v1/request", io.MultiReader(bytes.NewReader(big)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("chunked body over the limit: %d", resp.StatusCode)
	}
}

func TestAuth(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	var e apiErr
	for _, k := range []string{"", "gn_00000000000000000000000000000000", "nonsense"} {
		if code, _ := ta.call(t, "POST", "/api/v1/request", k, map[string]any{"task_type": "echo", "content": "x"}, &e); code != 401 || e.Error.Code != "invalid_api_key" {
			t.Fatalf("key %q: %d %+v", k, code, e)
		}
	}
	// The deprecated body field still authenticates.
	ch := ta.requestAsync("", map[string]any{"task_type": "echo", "content": "x", "api_key": key})
	m := n.Expect("task_assign")
	n.Result(m.Payload["task_id"].(string), "completed", "x")
	if r := waitFor(t, ch, 3*time.Second); r.code != 200 {
		t.Fatalf("body api_key: %d %s", r.code, r.body)
	}
}

func TestNoNodeIs404(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	var e apiErr
	if code, _ := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "translate", "content": "x"}, &e); code != 404 || e.Error.Code != "no_node_available" {
		t.Fatalf("%d %+v", code, e)
	}
	// A stream with no node is a plain HTTP error too, before any event.
	if code, _ := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "translate", "content": "x", "stream": true}, &e); code != 404 {
		t.Fatalf("stream: %d %+v", code, e)
	}
}

// A request that demands official nodes never reaches a community node,
// from the body or the header, even when only community nodes are free.
func TestTrustOfficial(t *testing.T) {
	ta := startApp(t, nil)
	community := ta.account(t, "comm", "community")
	official := ta.account(t, "off", "official")
	cn := connectNode(t, ta.wsURL, reg(community, "c", "echo"))
	var e apiErr
	code, _ := ta.call(t, "POST", "/api/v1/request", community, map[string]any{"task_type": "echo", "content": "x", "trust": "official"}, &e)
	if code != 404 || !strings.Contains(e.Error.Message, "official") {
		t.Fatalf("official demanded with only community nodes: %d %+v", code, e)
	}
	req, _ := http.NewRequest("POST", ta.url+"/api/v1/request", strings.NewReader(`{"task_type":"echo","content":"x","trust":"any"}`))
	req.Header.Set("Authorization", "Bearer "+community)
	req.Header.Set("X-GemmaNet-Trust", "official")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("header official (stricter than body any): %d", resp.StatusCode)
	}
	on := connectNode(t, ta.wsURL, reg(official, "o", "echo"))
	ch := ta.requestAsync(community, map[string]any{"task_type": "echo", "content": "x", "trust": "official"})
	m := on.Expect("task_assign")
	on.Result(m.Payload["task_id"].(string), "completed", "x")
	var res result
	r := waitFor(t, ch, 3*time.Second)
	r.decode(t, &res)
	if res.NodeID != on.ID {
		t.Fatalf("served by %s, want the official node", res.NodeID)
	}
	select {
	case m := <-cn.Msgs:
		t.Fatalf("community node got %s", m.MsgType)
	default:
	}
	var list []map[string]any
	ta.call(t, "GET", "/api/v1/nodes", "", nil, &list)
	for _, n := range list {
		want := map[string]string{cn.ID: "community", on.ID: "official"}[n["node_id"].(string)]
		if n["trust"] != want {
			t.Fatalf("node %v: trust %v, want %s", n["node_id"], n["trust"], want)
		}
	}
}

func TestFailingHandlerAndReputation(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	m := n.Expect("task_assign")
	n.Result(m.Payload["task_id"].(string), "failed", "handler exploded")
	var res result
	r := waitFor(t, ch, 3*time.Second)
	r.decode(t, &res)
	if r.code != 200 || res.Status != "failed" || res.Result != "handler exploded" {
		t.Fatalf("%d %+v", r.code, res)
	}
	var rep map[string]any
	ta.call(t, "GET", "/api/v1/reputation/"+n.ID, "", nil, &rep)
	if rep["total_tasks"] != 1.0 || rep["success_rate"] != 0.0 || rep["node_id"] != n.ID {
		t.Fatalf("reputation after a failure: %v", rep)
	}
	// 40·0 (completion) + 20·~1 (speed) + 20·1 (recency) + 20·0.5 (unrated) ≈ 50,
	// where one success would give ≈ 90.
	if score := rep["score"].(float64); score < 49 || score > 50 {
		t.Fatalf("score %v after one failure, want about 50", score)
	}
	var board []map[string]any
	ta.call(t, "GET", "/api/v1/leaderboard", "", nil, &board)
	if len(board) != 1 || board[0]["name"] != "w" {
		t.Fatalf("leaderboard %v", board)
	}
}

func TestRating(t *testing.T) {
	ta := startApp(t, nil)
	alice, bob := ta.account(t, "alice", ""), ta.account(t, "bob", "")
	n := connectNode(t, ta.wsURL, reg(alice, "w", "echo"))
	ch := ta.requestAsync(alice, map[string]any{"task_type": "echo", "content": "x"})
	m := n.Expect("task_assign")
	id := m.Payload["task_id"].(string)
	n.Result(id, "completed", "x")
	waitFor(t, ch, 3*time.Second)

	var e apiErr
	if code, _ := ta.call(t, "POST", "/api/v1/rate", alice, map[string]any{"task_id": id, "rating": 6}, &e); code != 400 {
		t.Fatalf("rating 6: %d %+v", code, e)
	}
	if code, _ := ta.call(t, "POST", "/api/v1/rate", bob, map[string]any{"task_id": id, "rating": 5}, &e); code != 403 {
		t.Fatalf("other account: %d %+v", code, e)
	}
	var ok map[string]any
	if code, _ := ta.call(t, "POST", "/api/v1/rate", alice, map[string]any{"task_id": id, "rating": 5}, &ok); code != 200 ||
		ok["status"] != "rated" || ok["rating"] != 5.0 || len(ok["node_ids"].([]any)) != 1 || ok["node_ids"].([]any)[0] != n.ID {
		t.Fatalf("rating 5: %d %v", code, ok)
	}
	if code, _ := ta.call(t, "POST", "/api/v1/rate", alice, map[string]any{"task_id": id, "rating": 4}, &e); code != 409 {
		t.Fatalf("second rating: %d %+v", code, e)
	}
	if code, _ := ta.call(t, "POST", "/api/v1/rate", alice, map[string]any{"task_id": "nope", "rating": 4}, &e); code != 404 {
		t.Fatalf("unknown task: %d %+v", code, e)
	}
	var rep map[string]any
	ta.call(t, "GET", "/api/v1/reputation/"+n.ID, "", nil, &rep)
	if rep["avg_rating"] != 5.0 || rep["total_ratings"] != 1.0 {
		t.Fatalf("reputation after rating: %v", rep)
	}
}

func TestTaskRecord(t *testing.T) {
	ta := startApp(t, nil)
	alice, bob := ta.account(t, "alice", ""), ta.account(t, "bob", "")
	n := connectNode(t, ta.wsURL, reg(alice, "w", "echo"))
	ch := ta.requestAsync(alice, map[string]any{"task_type": "echo", "content": "hello"})
	m := n.Expect("task_assign")
	id := m.Payload["task_id"].(string)
	var rec map[string]any
	if code, _ := ta.call(t, "GET", "/api/v1/tasks/"+id, alice, nil, &rec); code != 200 || rec["status"] != "running" || rec["running"] != true || rec["node_ids"].([]any)[0] != n.ID {
		t.Fatalf("in flight: %d %v", code, rec)
	}
	n.Result(id, "completed", "hello")
	waitFor(t, ch, 3*time.Second)
	if code, _ := ta.call(t, "GET", "/api/v1/tasks/"+id, alice, nil, &rec); code != 200 || rec["status"] != "completed" || rec["running"] != false ||
		rec["task_type"] != "echo" || rec["content_bytes"] != 5.0 || rec["result_bytes"] != 5.0 || rec["finished_at"] == "" {
		t.Fatalf("finished: %d %v", code, rec)
	}
	var e apiErr
	if code, _ := ta.call(t, "GET", "/api/v1/tasks/"+id, bob, nil, &e); code != 404 {
		t.Fatalf("another account sees the task: %d", code)
	}
}

func TestStreamWholeResultWhenNothingStreamed(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, _ := ta.stream(t, ctx, key, map[string]any{"task_type": "echo", "content": "x"})
	m := n.Expect("task_assign")
	n.Result(m.Payload["task_id"].(string), "completed", "all at once")
	if ev := s.next(t); ev["delta"] != "all at once" {
		t.Fatalf("event %v", ev)
	}
	if ev := s.next(t); ev["done"] != true {
		t.Fatalf("event %v", ev)
	}
	s.expectEOF(t)

	// A failed streaming task ends with task_failed.
	s, _ = ta.stream(t, ctx, key, map[string]any{"task_type": "echo", "content": "x"})
	m = n.Expect("task_assign")
	n.Result(m.Payload["task_id"].(string), "failed", "nope")
	ev := s.next(t)
	if e := ev["error"].(map[string]any); e["code"] != "task_failed" || e["message"] != "nope" || ev["task_id"] != m.Payload["task_id"] {
		t.Fatalf("event %v", ev)
	}
	s.expectEOF(t)
}

// A stream may outlive the task timeout while it keeps producing, and a
// silent one times out between chunks.
func TestStreamTimeouts(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.TaskTimeout = 300 * time.Millisecond; c.StreamMax = 5 * time.Second })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, nodetest.WithCancel(reg(key, "w", "echo")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, _ := ta.stream(t, ctx, key, map[string]any{"task_type": "echo", "content": "x"})
	id := n.Expect("task_assign").Payload["task_id"]
	start := time.Now()
	for i := 0; time.Since(start) < time.Second; i++ {
		n.MustSend("task_chunk", map[string]any{"task_id": id, "delta": "."})
		if ev := s.next(t); ev["delta"] != "." {
			t.Fatalf("event %v", ev)
		}
		time.Sleep(100 * time.Millisecond) // the node's pace; below the 300ms timeout
	}
	n.Result(id.(string), "completed", "...")
	if ev := s.next(t); ev["done"] != true {
		t.Fatalf("stream of 1s under a 300ms timeout did not complete: %v", ev)
	}

	s, _ = ta.stream(t, ctx, key, map[string]any{"task_type": "echo", "content": "x"})
	id = n.Expect("task_assign").Payload["task_id"]
	n.MustSend("task_chunk", map[string]any{"task_id": id, "delta": "a"})
	s.next(t)
	ev := s.next(t) // silence follows
	if e := ev["error"].(map[string]any); e["code"] != "timeout" {
		t.Fatalf("event %v", ev)
	}
	if m := n.Expect("task_cancel"); m.Payload["task_id"] != id {
		t.Fatalf("cancel for %v, want %v", m.Payload["task_id"], id)
	}
}

func TestNodeDisconnectIs502Fast(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	other := connectNode(t, ta.wsURL, reg(key, "other", "other"))
	chOther := ta.requestAsync(key, map[string]any{"task_type": "other", "content": "x"})
	mOther := other.Expect("task_assign")

	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	n.Expect("task_assign")
	start := time.Now()
	_ = n.Conn.CloseNow() // the node vanishes without a close handshake
	var e apiErr
	r := waitFor(t, ch, 3*time.Second)
	r.decode(t, &e)
	if r.code != 502 || e.Error.Code != "node_disconnected" || time.Since(start) > 2500*time.Millisecond {
		t.Fatalf("%d %+v after %s", r.code, e, time.Since(start))
	}
	// A closed connection fails only its own tasks.
	other.Result(mOther.Payload["task_id"].(string), "completed", "fine")
	if r := waitFor(t, chOther, 3*time.Second); r.code != 200 {
		t.Fatalf("the other node's task: %d %s", r.code, r.body)
	}
}

func TestResultCap(t *testing.T) {
	const limit = 1 << 20
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, nodetest.WithCancel(reg(key, "w", "echo")))
	run := func(size int) reply {
		ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
		m := n.Expect("task_assign")
		n.Result(m.Payload["task_id"].(string), "completed", strings.Repeat("é", size/2)+strings.Repeat("x", size%2))
		return waitFor(t, ch, 5*time.Second)
	}
	if r := run(limit); r.code != 200 {
		t.Fatalf("result of exactly %d bytes: %d", limit, r.code)
	}
	var e apiErr
	r := run(limit + 1)
	r.decode(t, &e)
	if r.code != 502 || e.Error.Code != "result_too_large" {
		t.Fatalf("one byte over: %d %+v", r.code, e)
	}
	// The node stays usable.
	if r := run(10); r.code != 200 {
		t.Fatalf("after an oversized result: %d %s", r.code, r.body)
	}
	// Streamed chunks count together: over the cap, the stream fails and the node is told to stop.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, _ := ta.stream(t, ctx, key, map[string]any{"task_type": "echo", "content": "x"})
	id := n.Expect("task_assign").Payload["task_id"]
	half := strings.Repeat("y", limit/2-64) // each chunk costs 64 bytes more than its delta
	n.MustSend("task_chunk", map[string]any{"task_id": id, "delta": half})
	n.MustSend("task_chunk", map[string]any{"task_id": id, "delta": half})
	s.next(t)
	s.next(t)
	n.MustSend("task_chunk", map[string]any{"task_id": id, "delta": "z"})
	ev := s.next(t)
	if e := ev["error"].(map[string]any); e["code"] != "result_too_large" {
		t.Fatalf("event %v", ev)
	}
	if m := n.Expect("task_cancel"); m.Payload["task_id"] != id {
		t.Fatalf("cancel %v", m.Payload)
	}
	if r := run(10); r.code != 200 {
		t.Fatalf("after an oversized stream: %d %s", r.code, r.body)
	}
}

func TestStatusHealthMetrics(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.Version = "1.2.3" })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	n.Result(n.Expect("task_assign").Payload["task_id"].(string), "completed", "x")
	waitFor(t, ch, 3*time.Second)
	var st map[string]any
	if code, _ := ta.call(t, "GET", "/api/v1/status", "", nil, &st); code != 200 || st["status"] != "running" || st["version"] != "1.2.3" ||
		st["online_nodes"] != 1.0 || st["instance_id"] != nil { // ids are for the admin view (admin_test.go)
		t.Fatalf("status %d %v", code, st)
	}
	var h map[string]any
	if code, _ := ta.call(t, "GET", "/api/health", "", nil, &h); code != 200 || h["status"] != "ok" {
		t.Fatalf("health %d %v", code, h)
	}
	code, body, _, err := ta.do("GET", "/livez", "", nil)
	if err != nil || code != 200 || string(body) != "ok\n" {
		t.Fatalf("livez %d %q %v", code, body, err)
	}
	_, body, _, err = ta.do("GET", "/metrics", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"switchyard_nodes_connected 1", "switchyard_tasks_in_flight", "switchyard_tasks_duration_seconds",
		"switchyard_nodes_send_queue_drops_total", "switchyard_store_batch_lag_seconds", "switchyard_http_requests_total", "go_goroutines"} {
		if !bytes.Contains(body, []byte(name)) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func TestRegisterEndpoint(t *testing.T) {
	closed := startApp(t, nil)
	var e apiErr
	if code, _ := closed.call(t, "POST", "/api/v1/register", "", map[string]any{}, &e); code != 403 || e.Error.Code != "registration_closed" {
		t.Fatalf("closed registration: %d %+v", code, e)
	}
	open := startApp(t, func(c *Config) { c.OpenRegistration = true; c.RegisterRate = 1 })
	var out map[string]string
	if code, _ := open.call(t, "POST", "/api/v1/register", "", map[string]any{"email": "a@example.com"}, &out); code != 200 || !strings.HasPrefix(out["api_key"], "gn_") || out["account_id"] == "" {
		t.Fatalf("register: %d %v", code, out)
	}
	var acct map[string]any
	if code, _ := open.call(t, "GET", "/api/v1/account", out["api_key"], nil, &acct); code != 200 || acct["account_id"] != out["account_id"] || acct["email"] != "a@example.com" {
		t.Fatalf("new key: %d %v", code, acct)
	}
	code, h := open.call(t, "POST", "/api/v1/register", "", nil, &e)
	if code != 429 || h.Get("Retry-After") == "" {
		t.Fatalf("second sign-up in an hour with a limit of 1: %d %+v", code, e)
	}
}

func TestRequestRateLimitHeaders(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.RequestRate = 2 })
	key := ta.account(t, "alice", "")
	for i := 0; i < 2; i++ {
		code, h := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "none", "content": "x"}, nil)
		if code != 404 || h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != []string{"1", "0"}[i] || h.Get("X-RateLimit-Reset") == "" {
			t.Fatalf("request %d: %d %v", i, code, h)
		}
	}
	var e apiErr
	code, h := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "none", "content": "x"}, &e)
	if code != 429 || e.Error.Code != "rate_limited" || h.Get("Retry-After") == "" {
		t.Fatalf("third: %d %+v %v", code, e, h)
	}
	// Another key has its own budget.
	other := ta.account(t, "bob", "")
	if code, _ := ta.call(t, "POST", "/api/v1/request", other, map[string]any{"task_type": "none", "content": "x"}, nil); code != 404 {
		t.Fatalf("other key: %d", code)
	}
}

// A node that cannot read an assign answers status "rejected": the task
// fails at once with 502 task_rejected, and the failure is not held against
// the node (invariant 15: a requester's bad input cannot hurt its standing).
func TestRejectedTaskIsNotHeldAgainstTheNode(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	ch := ta.requestAsync(key, map[string]any{"task_type": "echo", "content": "x"})
	m := n.Expect("task_assign")
	n.Result(m.Payload["task_id"].(string), "rejected", "cannot decode params")
	var e apiErr
	r := waitFor(t, ch, 3*time.Second)
	r.decode(t, &e)
	if r.code != 502 || e.Error.Code != "task_rejected" || !strings.Contains(e.Error.Message, "cannot decode params") {
		t.Fatalf("%d %+v", r.code, e)
	}
	var rep map[string]any
	ta.call(t, "GET", "/api/v1/reputation/"+n.ID, "", nil, &rep)
	if rep["total_tasks"] != 0.0 {
		t.Fatalf("reputation after a rejected task: %v", rep)
	}
}

// A plain answer says in Server-Timing how long the coordinator took and
// how long the node said it worked, on the GemmaNet and the OpenAI route.
func TestServerTimingSplitsCoordinatorAndNode(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo", "chat"))
	answer := func(m nodetest.Msg) {
		n.MustSend("task_result", map[string]any{"task_id": m.TaskID(), "node_id": n.ID, "status": "completed",
			"result": "ok", "processing_time_ms": 1234, "usage": nil})
	}
	check := func(route, h string) {
		t.Helper()
		var own float64
		var node int64
		if _, err := fmt.Sscanf(h, `coordinator;dur=%g;desc="switchyard", node;dur=%d;desc="node processing"`, &own, &node); err != nil {
			t.Fatalf("%s: Server-Timing %q: %v", route, h, err)
		}
		if node != 1234 || own < 0 || own > 1000 {
			t.Fatalf("%s: Server-Timing %q: node %d ms (want 1234, what it reported), coordinator %.2f ms (want 0 to 1000)", route, h, node, own)
		}
	}

	plain := async(func() chatReply {
		code, b, h, err := ta.do(http.MethodPost, "/api/v1/request", key, map[string]any{"task_type": "echo", "content": "x"})
		return chatReply{reply{code, b, err}, h}
	})
	answer(nextTask(t, n))
	r := <-plain
	if r.code != 200 {
		t.Fatalf("request: %d %s", r.code, r.body)
	}
	check("/api/v1/request", r.header.Get("Server-Timing"))

	chat := ta.chatAsync(key, map[string]any{"model": "gemmanet/chat", "messages": []map[string]string{{"role": "user", "content": "hi"}}})
	answer(nextTask(t, n))
	cr := <-chat
	if cr.code != 200 {
		t.Fatalf("chat: %d %s", cr.code, cr.body)
	}
	check("/v1/chat/completions", cr.header.Get("Server-Timing"))
}
