package tasks_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"
)

// assigned waits for the first task_assign any of ns receives.
func assigned(t *testing.T, ns ...*nodetest.Node) (*nodetest.Node, nodetest.Msg) {
	t.Helper()
	cases := make([]reflect.SelectCase, 0, len(ns)+1)
	for _, n := range ns {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.Msgs)})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(5 * time.Second))})
	i, v, _ := reflect.Select(cases)
	if i == len(ns) {
		t.Fatal("no node was assigned the task within 5s")
	}
	m := v.Interface().(nodetest.Msg)
	if m.MsgType != "task_assign" {
		t.Fatalf("node %s got %s %v, want task_assign", ns[i].ID, m.MsgType, m.Payload)
	}
	return ns[i], m
}

// others is ns without n.
func others(ns []*nodetest.Node, n *nodetest.Node) []*nodetest.Node {
	return slices.DeleteFunc(slices.Clone(ns), func(x *nodetest.Node) bool { return x == n })
}

// retryPair is a requester and an owner with count nodes of type "echo",
// the owner's node outcomes and metrics kept.
func retryPair(t *testing.T, cfg tasks.Config, count int) (r, o *instance, ns []*nodetest.Node, reg *prometheus.Registry) {
	t.Helper()
	b := bus.NewMemory()
	t.Cleanup(func() { _ = b.Close() })
	o = newInstance(t, "O", b, nil, cfg)
	reg = prometheus.NewRegistry()
	cfg.Registerer = reg // the requester's: it retries
	r = newInstance(t, "R", b, o.hub, cfg)
	for i := range count {
		ns = append(ns, nodetest.Connect(t, o.wsURL, nodetest.WithCancel(nodetest.Reg("good", string(rune('a'+i)), "echo"))))
	}
	return r, o, ns, reg
}

// A node that goes away before answering costs a retry on another node, not
// the request: the client gets the other node's answer, which (with the
// record) says the first attempt was lost and why; the lost node's
// failure goes into its standing once the other has the task.
func TestRetryAfterTheNodeDisconnects(t *testing.T) {
	r, _, ns, reg := retryPair(t, tasks.Config{}, 3)
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "t", AccountID: "acct", TaskType: "echo", Content: "hi"}, tasks.Hooks{})
	lost, _ := assigned(t, ns...)
	_ = lost.Conn.CloseNow()
	next, m := assigned(t, others(ns, lost)...)
	if m.TaskID() != "t" || m.Payload["content"] != "hi" {
		t.Fatalf("the retry's assign %v", m.Payload)
	}
	next.Result("t", "completed", "HI")
	got := wait(t, ch)
	if got.err != nil || got.out.Result != "HI" || got.out.NodeID != next.ID || got.out.Attempts != 2 {
		t.Fatalf("%+v", got)
	}
	if len(got.out.Retries) != 1 || got.out.Retries[0].NodeID != lost.ID || got.out.Retries[0].Reason != tasks.RetryNodeDisconnected {
		t.Fatalf("retries %+v, want one of %s for node_disconnected", got.out.Retries, lost.ID)
	}
	rec := r.rec.tasks[0]
	if rec.Attempts != 2 || !slices.Equal(rec.NodeIDs, []string{next.ID}) || !reflect.DeepEqual(rec.Retries, got.out.Retries) {
		t.Fatalf("record %+v", rec)
	}
	if n := gathered(t, reg, "switchyard_tasks_retries_total"); n != 1 {
		t.Fatalf("switchyard_tasks_retries_total = %v, want 1", n)
	}
	outs := r.rec.outcomes()
	if len(outs) != 2 || outs[0].NodeID != lost.ID || outs[0].Success || outs[1].NodeID != next.ID || !outs[1].Success {
		t.Fatalf("node outcomes %+v: want the lost node's failure, then the other's success", outs)
	}
}

// A node that answers "unavailable" failed the task for its own sake: it
// is run again elsewhere (node_unavailable). With no other node, the
// client gets the node's answer: a failed task, as "failed" would be.
func TestRetryAfterTheNodeAnswersUnavailable(t *testing.T) {
	r, o, ns, _ := retryPair(t, tasks.Config{}, 2)
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "u", TaskType: "echo", Content: "hello"}, tasks.Hooks{})
	first, _ := assigned(t, ns...)
	first.MustSend("task_result", map[string]any{"task_id": "u", "status": "unavailable", "result": "out of memory",
		"usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 0}})
	second, _ := assigned(t, others(ns, first)...)
	second.MustSend("task_result", map[string]any{"task_id": "u", "status": "unavailable", "result": "model not loaded",
		"usage": map[string]any{"prompt_tokens": 2, "completion_tokens": 1}})
	got := wait(t, ch)
	if got.err != nil || got.out.Status != tasks.StatusFailed || got.out.Result != "model not loaded" || got.out.NodeID != second.ID {
		t.Fatalf("%+v: want the second node's failed answer", got)
	}
	if len(got.out.Retries) != 1 || got.out.Retries[0].Reason != tasks.RetryNodeUnavailable {
		t.Fatalf("retries %+v", got.out.Retries)
	}
	// Each node's tokens are charged once, as it reported them: the
	// answer carries the last node's.
	if u := got.out.Usage; u == nil || u.PromptTokens != 2 || u.CompletionTokens != 1 {
		t.Fatalf("the answer's usage %+v, want the second node's", u)
	}
	waitUntil(t, func() bool { return len(o.rec.reports()) == 2 })
	byNode := map[string]int64{}
	for _, rep := range o.rec.reports() {
		byNode[rep.NodeID] += rep.PromptTokens*10 + rep.CompletionTokens
	}
	if byNode[first.ID] != 10 || byNode[second.ID] != 21 {
		t.Fatalf("usage reports %+v: want each node's once", o.rec.reports())
	}
}

// With no other node that can take the task, the request fails as the
// attempt did, at once: no wait for a node, no "no node available".
func TestNoRetryWithoutAnotherNode(t *testing.T) {
	r, _, ns, reg := retryPair(t, tasks.Config{}, 1)
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "s", TaskType: "echo"}, tasks.Hooks{})
	ns[0].Expect("task_assign")
	start := time.Now()
	_ = ns[0].Conn.CloseNow()
	got := wait(t, ch)
	if code(got.err) != tasks.CodeNodeDisconnected || time.Since(start) > time.Second {
		t.Fatalf("%+v after %s; want node_disconnected at once", got, time.Since(start))
	}
	if rec := r.rec.tasks[0]; rec.Attempts != 1 || rec.Retries != nil || !slices.Equal(rec.NodeIDs, []string{ns[0].ID}) {
		t.Fatalf("record %+v", rec)
	}
	if n := gathered(t, reg, "switchyard_tasks_retries_total"); n != 0 {
		t.Fatalf("switchyard_tasks_retries_total = %v, want 0", n)
	}
}

// The retry budget: the request's own (none here), or the configured one
// (one), is all a task gets.
func TestRetryBudget(t *testing.T) {
	t.Run("request asks for none", func(t *testing.T) {
		r, _, ns, _ := retryPair(t, tasks.Config{}, 2)
		ch := run(t, r, context.Background(), tasks.Request{TaskID: "n", TaskType: "echo", Retries: -1}, tasks.Hooks{})
		lost, _ := assigned(t, ns...)
		_ = lost.Conn.CloseNow()
		if got := wait(t, ch); code(got.err) != tasks.CodeNodeDisconnected {
			t.Fatalf("%+v", got)
		}
	})
	t.Run("configured one", func(t *testing.T) {
		r, _, ns, _ := retryPair(t, tasks.Config{}, 3)
		ch := run(t, r, context.Background(), tasks.Request{TaskID: "o", TaskType: "echo"}, tasks.Hooks{})
		first, _ := assigned(t, ns...)
		_ = first.Conn.CloseNow()
		second, _ := assigned(t, others(ns, first)...)
		_ = second.Conn.CloseNow()
		got := wait(t, ch)
		if code(got.err) != tasks.CodeNodeDisconnected || len(r.rec.tasks[0].Retries) != 1 || r.rec.tasks[0].Attempts != 2 {
			t.Fatalf("%+v, record %+v: want node_disconnected after one retry", got, r.rec.tasks[0])
		}
	})
	t.Run("request asks for more", func(t *testing.T) {
		r, _, ns, _ := retryPair(t, tasks.Config{}, 3)
		ch := run(t, r, context.Background(), tasks.Request{TaskID: "m", TaskType: "echo", Retries: 2}, tasks.Hooks{})
		first, _ := assigned(t, ns...)
		_ = first.Conn.CloseNow()
		second, _ := assigned(t, others(ns, first)...)
		_ = second.Conn.CloseNow()
		third, _ := assigned(t, others(others(ns, first), second)...)
		third.Result("m", "completed", "ok")
		if got := wait(t, ch); got.err != nil || got.out.Attempts != 3 || len(got.out.Retries) != 2 {
			t.Fatalf("%+v", got)
		}
	})
}

// A stream whose node goes away before its first chunk is retried like a
// plain task, unseen by its client; one that already delivered text is not
// (its node declared no resume): it ends with the error, as before.
func TestStreamRetryBeforeItsFirstChunk(t *testing.T) {
	r, _, ns, _ := retryPair(t, tasks.Config{}, 3)
	chunks := make(chan string, 16)
	hooks := tasks.Hooks{Chunk: func(d string) error { chunks <- d; return nil }}
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "st", TaskType: "echo", Stream: true}, hooks)
	lost, _ := assigned(t, ns...)
	_ = lost.Conn.CloseNow()
	next, _ := assigned(t, others(ns, lost)...)
	next.Chunk("st", "a")
	next.Chunk("st", "b")
	next.Result("st", "completed", "ab")
	got := wait(t, ch)
	if d := drain(chunks); got.err != nil || d != "ab" || got.out.Attempts != 2 {
		t.Fatalf("%+v, deltas %q", got, d)
	}

	ch = run(t, r, context.Background(), tasks.Request{TaskID: "st2", TaskType: "echo", Stream: true}, hooks)
	live := others(ns, lost)
	cut, _ := assigned(t, live...)
	cut.Chunk("st2", "x")
	if d := <-chunks; d != "x" {
		t.Fatalf("delta %q", d)
	}
	_ = cut.Conn.CloseNow()
	got = wait(t, ch)
	if d := drain(chunks); code(got.err) != tasks.CodeNodeDisconnected || d != "" {
		t.Fatalf("%+v, deltas after x %q: want node_disconnected", got, d)
	}
	select {
	case m := <-others(live, cut)[0].Msgs:
		t.Fatalf("the other node was sent %s %v", m.MsgType, m.Payload)
	default:
	}
}

// drain returns what ch holds now, joined.
func drain(ch <-chan string) string {
	var b strings.Builder
	for {
		select {
		case d := <-ch:
			b.WriteString(d)
		default:
			return b.String()
		}
	}
}

// outcomes returns the node outcomes recorded so far.
func (r *records) outcomes() []store.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outs)
}

// A stream that delivered text when its node went away continues on a node
// that declared "resume": its task_assign carries the text the client has,
// and the client reads the rest without a gap or a repeat. A node that did
// not declare it is never sent the stream.
func TestStreamResumesOnAResumeNode(t *testing.T) {
	r, o, ns, reg := retryPair(t, tasks.Config{}, 1) // ns[0]: no resume
	resumer := func(name string) *nodetest.Node {
		m := nodetest.Reg("good", name, "echo")
		m["features"] = []string{"task_cancel", "resume"}
		return nodetest.Connect(t, o.wsURL, m)
	}
	first := resumer("r1")
	chunks := make(chan string, 16)
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "rs", TaskType: "echo", Content: "count", Stream: true},
		tasks.Hooks{Chunk: func(d string) error { chunks <- d; return nil }})
	// Whichever node got it streams two chunks and dies: only the one
	// that can resume may go on, so make sure that is a resume node.
	got, m := assigned(t, ns[0], first)
	if m.Payload["resume_text"] != nil {
		t.Fatalf("a first attempt carries resume_text: %v", m.Payload)
	}
	got.Chunk("rs", "one ")
	got.Chunk("rs", "two ")
	if d := <-chunks + <-chunks; d != "one two " {
		t.Fatalf("deltas %q", d)
	}
	second := resumer("r2")
	waitUntil(t, func() bool { return len(o.hub.Sessions()) == 3 })
	_ = got.Conn.CloseNow()
	next, m := assigned(t, others([]*nodetest.Node{ns[0], first, second}, got)...)
	if next == ns[0] || m.Payload["resume_text"] != "one two " || m.TaskID() != "rs" {
		t.Fatalf("node %s was assigned %v; want a resume node, told the text so far", next.ID, m.Payload)
	}
	next.Chunk("rs", "three")
	next.MustSend("task_result", map[string]any{"task_id": "rs", "status": "completed", "result": "three",
		"processing_time_ms": 1, "usage": map[string]any{"prompt_tokens": 3, "completion_tokens": 1}})
	out := wait(t, ch)
	if d := drain(chunks); out.err != nil || d != "three" || out.out.Result != "one two three" {
		t.Fatalf("%+v, deltas after the resume %q; want \"three\" and the whole text as the result", out, d)
	}
	if len(out.out.Retries) != 1 || out.out.Retries[0].ResumedBytes != 8 || out.out.Retries[0].NodeID != got.ID {
		t.Fatalf("retries %+v", out.out.Retries)
	}
	if rec := r.rec.tasks[0]; !slices.Equal(rec.NodeIDs, []string{got.ID, next.ID}) {
		t.Fatalf("record's nodes %v, want both that served it", rec.NodeIDs)
	}
	if n := gathered(t, reg, "switchyard_tasks_resumed_total"); n != 1 {
		t.Fatalf("switchyard_tasks_resumed_total = %v", n)
	}
}
