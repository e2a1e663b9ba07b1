package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Long translate tasks are split over up to three nodes and joined in
// order; other task types, and short content, are not.
func TestSplitOnlyConfiguredTypes(t *testing.T) {
	ta := startApp(t, nil) // split types default to translate
	key := ta.account(t, "alice", "")
	var ns []*wireNode
	for i := 0; i < 3; i++ {
		ns = append(ns, connectNode(t, ta.wsURL, reg(key, fmt.Sprint("n", i), "translate", "echo")))
	}
	var paras []string
	for i := 0; i < 6; i++ {
		paras = append(paras, fmt.Sprintf("paragraph %d %s", i, strings.Repeat("x", 200)))
	}
	long := strings.Join(paras, "\n\n")

	// Answer each part with its content upper-cased, in reverse order of arrival.
	answer := func() map[string]string {
		got := map[string]string{}
		for len(got) < 3 {
			for _, n := range ns {
				select {
				case m := <-n.Msgs:
					if m.MsgType == "task_assign" {
						got[m.TaskID()] = m.Payload["content"].(string)
						defer func(n *wireNode, id, c string) { n.Result(id, "completed", strings.ToUpper(c)) }(n, m.TaskID(), m.Payload["content"].(string))
					}
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		return got
	}
	ch := ta.requestAsync(key, map[string]any{"task_type": "translate", "content": long})
	parts := answer()
	if len(parts) != 3 {
		t.Fatalf("parts %v", parts)
	}
	var res struct {
		result
		NodeID *string `json:"node_id"`
	}
	r := waitFor(t, ch, 5*time.Second)
	r.decode(t, &res)
	want := strings.ToUpper(strings.Join(paras[0:2], "\n\n") + "\n\n" + strings.Join(paras[2:4], "\n\n") + "\n\n" + strings.Join(paras[4:6], "\n\n"))
	if r.code != 200 || res.Status != "completed" || res.Result != want || res.NodeID != nil {
		t.Fatalf("HTTP %d status %s node %v; result in order: %v", r.code, res.Status, res.NodeID, res.Result == want)
	}
	// One record, every node that served a part; a rating applies to each.
	var rated map[string]any
	if code, _ := ta.call(t, "POST", "/api/v1/rate", key, map[string]any{"task_id": res.TaskID, "rating": 4}, &rated); code != 200 || len(rated["node_ids"].([]any)) != 3 {
		t.Fatalf("rating the split task: %d %v", code, rated)
	}

	// The same content as echo is not split.
	ch = ta.requestAsync(key, map[string]any{"task_type": "echo", "content": long})
	var whole string
	var who *wireNode
	for whole == "" {
		for _, n := range ns {
			select {
			case m := <-n.Msgs:
				whole, who = m.Payload["content"].(string), n
				who.Result(m.TaskID(), "completed", "ok")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if whole != long {
		t.Fatalf("echo content was split: %d of %d characters", len(whole), len(long))
	}
	waitFor(t, ch, 5*time.Second)
	// Short translate content is not split either.
	ch = ta.requestAsync(key, map[string]any{"task_type": "translate", "content": "short text. two sentences. three."})
	whole = ""
	for whole == "" {
		for _, n := range ns {
			select {
			case m := <-n.Msgs:
				whole = m.Payload["content"].(string)
				n.Result(m.TaskID(), "completed", "ok")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if whole != "short text. two sentences. three." {
		t.Fatalf("short content split: %q", whole)
	}
	waitFor(t, ch, 5*time.Second)
}

// A streaming split task answers with the joined result as one delta.
func TestSplitStream(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.SplitTaskTypes = []string{"summarize"} })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, map[string]any{"api_key": key, "name": "solo", "capabilities": []string{"summarize"}, "max_concurrency": 3})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, code := ta.stream(t, ctx, key, map[string]any{"task_type": "summarize", "content": strings.Repeat("word ", 300)})
	for i := 0; i < 3; i++ {
		m := n.Expect("task_assign")
		if m.Payload["stream"] != false {
			t.Fatalf("a part was sent as a stream: %v", m.Payload)
		}
		n.Result(m.TaskID(), "completed", fmt.Sprint("part", m.TaskID()[len(m.TaskID())-1:]))
	}
	if code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	if ev := s.next(t); ev["delta"] != "part0\n\npart1\n\npart2" {
		t.Fatalf("event %v", ev)
	}
	if ev := s.next(t); ev["done"] != true {
		t.Fatalf("event %v", ev)
	}
	s.expectEOF(t)
}
