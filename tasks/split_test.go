package tasks_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/tasks"
)

func TestSplitContent(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string
	}{
		{"paragraphs", "a\n\nb\n\nc\n\nd", []string{"a", "b", "c\n\nd"}},
		{"six paragraphs", "1\n\n2\n\n3\n\n4\n\n5\n\n6", []string{"1\n\n2", "3\n\n4", "5\n\n6"}},
		{"sentences", "One. Two. Three. Four.", []string{"One.", "Two.", "Three. Four."}},
		{"characters", "abcdefgh", []string{"ab", "cd", "efgh"}},
		{"runes, not bytes", "ééééééé", []string{"éé", "éé", "ééé"}},
	}
	for _, c := range cases {
		got := tasks.SplitContent(c.in, 3)
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s: SplitContent(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
	if got := tasks.MergeResults([]string{" a ", "b\n", "\tc"}); got != "a\n\nb\n\nc" {
		t.Errorf("MergeResults = %q", got)
	}
}

// A split task's parts go to different nodes, in parallel, and the joined
// result keeps their order whatever order they finish in.
func TestRunSplitSpreadsAndJoinsInOrder(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{})
	var ns []*nodetest.Node
	for _, name := range []string{"a", "b", "c"} {
		ns = append(ns, nodetest.Connect(t, o.wsURL, nodetest.Reg("good", name, "translate")))
	}
	content := "first paragraph\n\nsecond paragraph\n\nthird paragraph"
	ch := make(chan outcome, 1)
	go func() {
		out, err := r.eng.RunSplit(context.Background(), tasks.Request{TaskID: "big", AccountID: "acct", TaskType: "translate", Content: content}, tasks.Hooks{})
		ch <- outcome{out, err}
	}()
	// Each node gets exactly one part; answer them last first.
	var mu sync.Mutex
	parts := map[string]*nodetest.Node{}
	for _, n := range ns {
		m := n.Expect("task_assign")
		mu.Lock()
		parts[m.TaskID()] = n
		mu.Unlock()
		if !strings.HasPrefix(m.TaskID(), "big-") {
			t.Fatalf("sub-task id %q", m.TaskID())
		}
	}
	for _, id := range []string{"big-2", "big-1", "big-0"} {
		n := parts[id]
		if n == nil {
			t.Fatalf("no node got %s (got %v)", id, parts)
		}
		n.Result(id, "completed", "  T("+id+")  ")
	}
	got := wait(t, ch)
	if got.err != nil || got.out.Result != "T(big-0)\n\nT(big-1)\n\nT(big-2)" || got.out.Status != "completed" {
		t.Fatalf("%+v", got)
	}
	// Recorded once, under the parent id, with all three nodes.
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	if len(r.rec.tasks) != 1 || r.rec.tasks[0].ID != "big" || len(r.rec.tasks[0].NodeIDs) != 3 {
		t.Fatalf("records %+v", r.rec.tasks)
	}
}

// With one node, all parts go to it; a failed part makes the task failed.
func TestRunSplitOneNodeAndFailure(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{})
	n := nodetest.Connect(t, o.wsURL, map[string]any{"api_key": "good", "name": "solo", "capabilities": []string{"translate"}, "max_concurrency": 3})
	ch := make(chan outcome, 1)
	go func() {
		out, err := r.eng.RunSplit(context.Background(), tasks.Request{TaskID: "x", TaskType: "translate", Content: "a. b. c."}, tasks.Hooks{})
		ch <- outcome{out, err}
	}()
	for i := 0; i < 3; i++ {
		m := n.Expect("task_assign")
		status := "completed"
		if m.TaskID() == "x-1" {
			status = "failed"
		}
		n.Result(m.TaskID(), status, m.Payload["content"].(string))
	}
	got := wait(t, ch)
	if got.err != nil || got.out.Status != "failed" || got.out.Result != "a.\n\nb.\n\nc." {
		t.Fatalf("%+v", got)
	}
}

// When one part fails outright (its node went away, and the request allows
// no retry), the task fails at once and its sibling parts are cancelled on
// their nodes instead of running on.
func TestRunSplitFailedPartCancelsSiblings(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{})
	var ns []*nodetest.Node
	for _, name := range []string{"a", "b", "c"} {
		ns = append(ns, nodetest.Connect(t, o.wsURL, nodetest.WithCancel(nodetest.Reg("good", name, "translate"))))
	}
	ch := make(chan outcome, 1)
	go func() {
		out, err := r.eng.RunSplit(context.Background(), tasks.Request{TaskID: "big", AccountID: "acct", TaskType: "translate",
			Content: "first paragraph\n\nsecond paragraph\n\nthird paragraph", Retries: -1}, tasks.Hooks{})
		ch <- outcome{out, err}
	}()
	holder := map[string]*nodetest.Node{}
	for _, n := range ns {
		holder[n.Expect("task_assign").TaskID()] = n
	}
	lost := holder["big-1"]
	if lost == nil {
		t.Fatalf("no node got big-1 (got %v)", holder)
	}
	_ = lost.Conn.CloseNow()
	got := wait(t, ch)
	if e := tasks.AsError(got.err); got.err == nil || e.Code != tasks.CodeNodeDisconnected {
		t.Fatalf("want node_disconnected, got %+v", got)
	}
	for _, id := range []string{"big-0", "big-2"} {
		if m := holder[id].Expect("task_cancel"); m.TaskID() != id {
			t.Fatalf("%s's node got a cancel for %q", id, m.TaskID())
		}
	}
}
