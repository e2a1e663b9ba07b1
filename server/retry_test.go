package server

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/store"
)

// firstAssigned is the node of ns that gets the next task_assign, and the
// assign (benchmark probes passed over).
func firstAssigned(t *testing.T, ns ...*wireNode) (*wireNode, nodetest.Msg) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	cases := make([]reflect.SelectCase, 0, len(ns)+1)
	for _, n := range ns {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.Msgs)})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline)})
	for {
		i, v, _ := reflect.Select(cases)
		if i == len(ns) {
			t.Fatal("no node was assigned the task within 5s")
		}
		switch m := v.Interface().(nodetest.Msg); m.MsgType {
		case "task_assign":
			return ns[i], m
		case "benchmark":
		default:
			t.Fatalf("node %s got %s %v, want task_assign", ns[i].ID, m.MsgType, m.Payload)
		}
	}
}

// retryResult is an answer of POST /api/v1/request with its retry fields.
type retryResult struct {
	result
	Attempts int           `json:"attempts"`
	Retries  []store.Retry `json:"retries"`
}

// A node that goes away mid-task costs a retry on the other node, not the
// client's answer: the answer, its Server-Timing and the task's record say
// it took two attempts and why. A request may ask for no retry (body
// "retries": 0, or the header), and then fails as before.
func TestRequestRetriedOnAnotherNode(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	a := connectNode(t, ta.wsURL, reg(key, "a", "echo"))
	b := connectNode(t, ta.wsURL, reg(key, "b", "echo"))

	type answer struct {
		code int
		body []byte
		h    http.Header
	}
	send := func(body map[string]any) <-chan answer {
		return async(func() answer {
			code, raw, h, err := ta.do(http.MethodPost, "/api/v1/request", key, body)
			if err != nil {
				t.Error(err)
			}
			return answer{code, raw, h}
		})
	}
	ch := send(map[string]any{"task_type": "echo", "content": "hi"})
	lost, m := firstAssigned(t, a, b)
	id := m.TaskID()
	_ = lost.Conn.CloseNow()
	next := map[*wireNode]*wireNode{a: b, b: a}[lost]
	if n, m := firstAssigned(t, next); n != next || m.TaskID() != id || m.Payload["content"] != "hi" {
		t.Fatalf("the retry went to %s with %v", n.ID, m.Payload)
	}
	next.Result(id, "completed", "HI")
	got := waitFor(t, ch, 5*time.Second)
	var res retryResult
	if err := json.Unmarshal(got.body, &res); err != nil || got.code != 200 {
		t.Fatalf("HTTP %d %s: %v", got.code, got.body, err)
	}
	if res.Result != "HI" || res.NodeID != next.ID || res.Attempts != 2 || len(res.Retries) != 1 ||
		res.Retries[0].NodeID != lost.ID || res.Retries[0].Reason != "node_disconnected" {
		t.Fatalf("answer %s: want the other node's, two attempts, one retry from %s for node_disconnected", got.body, lost.ID)
	}
	if st := got.h.Get("Server-Timing"); !strings.Contains(st, `retry;dur=`) || !strings.Contains(st, `desc="node_disconnected"`) {
		t.Fatalf("Server-Timing %q: want a retry entry", st)
	}
	var rec taskView
	waitUntil(t, func() bool {
		code, _ := ta.call(t, http.MethodGet, "/api/v1/tasks/"+id, key, nil, &rec)
		return code == 200 && !rec.Running
	})
	if rec.Attempts != 2 || !reflect.DeepEqual(rec.Retries, res.Retries) || len(rec.NodeIDs) != 1 || rec.NodeIDs[0] != next.ID {
		t.Fatalf("record %+v", rec.TaskRecord)
	}

	// No retry asked for: the lost node's failure is the answer.
	survivor := connectNode(t, ta.wsURL, reg(key, "c", "echo"))
	ch = send(map[string]any{"task_type": "echo", "content": "x", "retries": 0})
	lost, _ = firstAssigned(t, next, survivor)
	_ = lost.Conn.CloseNow()
	got = waitFor(t, ch, 5*time.Second)
	var e apiErr
	if err := json.Unmarshal(got.body, &e); err != nil || got.code != http.StatusBadGateway || e.Error.Code != "node_disconnected" {
		t.Fatalf("with retries 0: HTTP %d %s, want 502 node_disconnected", got.code, got.body)
	}
}

// The retries a request asks for are checked: 0–3 in the body or the
// X-Task-Retries header.
func TestRetriesAskedForAreChecked(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	var e apiErr
	if code, _ := ta.call(t, http.MethodPost, "/api/v1/request", key, map[string]any{"task_type": "echo", "content": "x", "retries": 4}, &e); code != 422 || !strings.Contains(e.Error.Message, "retries") {
		t.Fatalf("retries 4: %d %+v", code, e)
	}
	for _, h := range []string{"4", "-1", "one", "1.5"} {
		req, err := http.NewRequest(http.MethodPost, ta.url+"/v1/chat/completions", strings.NewReader(`{"model":"gemmanet/echo","messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Task-Retries", h)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var oe openAIError
		_ = json.NewDecoder(resp.Body).Decode(&oe)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(oe.Error.Message, "X-Task-Retries") {
			t.Fatalf("X-Task-Retries %q: HTTP %d %+v, want 400 naming the header", h, resp.StatusCode, oe)
		}
	}
}

// An OpenAI stream resumes as a GemmaNet one does: the node that continues
// it is told the text so far, and the client's chat chunks go on with no
// gap and no repeat, to one "[DONE]".
func TestOpenAIStreamResumes(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	resumer := func(name string) *wireNode {
		m := reg(key, name, "chat")
		m["features"] = []string{"task_cancel", "resume"}
		return connectNode(t, ta.wsURL, m)
	}
	a, b := resumer("a"), resumer("b")
	ch := ta.streamAsync(context.Background(), key, map[string]any{"model": "gemmanet/chat", "messages": userMsg("count")})
	first, m := firstAssigned(t, a, b)
	id := m.TaskID()
	first.Chunk(id, "one ")
	first.Chunk(id, "two ")
	// The instance reads the two chunks before it sees the socket close
	// (TCP delivers what was sent before the FIN), and hands them to the
	// request in that order: both are the client's before the node is lost.
	_ = first.Conn.CloseNow()
	next := map[*wireNode]*wireNode{a: b, b: a}[first]
	if n, m := firstAssigned(t, next); n != next || m.TaskID() != id || m.Payload["resume_text"] != "one two " {
		t.Fatalf("the continuing node got %v", m.Payload)
	}
	next.Chunk(id, "three")
	next.Result(id, "completed", "three")
	events := waitFor(t, ch, 5*time.Second).check(t)
	var text strings.Builder
	for _, e := range events {
		if e == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %q: %v", e, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	if text.String() != "one two three" || events[len(events)-1] != "[DONE]" {
		t.Fatalf("the client read %q in %q; want \"one two three\" once, then [DONE]", text.String(), events)
	}
}
