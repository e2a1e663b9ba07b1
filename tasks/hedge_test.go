package tasks_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/tasks"
)

// A hedged type's plain task whose node has not answered within the delay
// gets a second copy on the other node; the first answer wins, and the
// slow copy is cancelled on its node ("hedge lost"). The task is recorded
// once, under the client's task id, with the node that answered.
func TestHedgeSecondCopyWins(t *testing.T) {
	r, _, ns, reg := retryPair(t, tasks.Config{Hedge: map[string]time.Duration{"echo": 50 * time.Millisecond}}, 2)
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "h", TaskType: "echo", Content: "x"}, tasks.Hooks{})
	slow, _ := assigned(t, ns...)
	fast, m := assigned(t, others(ns, slow)...)
	if m.TaskID() != "h-hedge" || m.Payload["content"] != "x" {
		t.Fatalf("the second copy's assign %v", m.Payload)
	}
	fast.Result("h-hedge", "completed", "fast")
	got := wait(t, ch)
	if got.err != nil || got.out.Result != "fast" || got.out.TaskID != "h" || got.out.NodeID != fast.ID || got.out.Hedge != tasks.HedgeSecond {
		t.Fatalf("%+v: want the second copy's answer under the task's id", got)
	}
	if c := slow.Expect("task_cancel"); c.TaskID() != "h" || c.Payload["reason"] != "hedge lost" {
		t.Fatalf("the slow copy's node got %v", c.Payload)
	}
	waitUntil(t, func() bool { return r.eng.Requesting() == 0 })
	if len(r.rec.tasks) != 1 || r.rec.tasks[0].ID != "h" || r.rec.tasks[0].NodeIDs[0] != fast.ID || r.rec.tasks[0].Status != "completed" {
		t.Fatalf("records %+v: want one, of the task, by the node that answered", r.rec.tasks)
	}
	if n := gathered(t, reg, "switchyard_tasks_hedges_total"); n != 1 {
		t.Fatalf("switchyard_tasks_hedges_total = %v", n)
	}
}

// A first copy that answers within the delay is the only one; one that
// answers after the second went out still wins if it is first.
func TestHedgeFirstCopy(t *testing.T) {
	r, _, ns, reg := retryPair(t, tasks.Config{Hedge: map[string]time.Duration{"echo": 200 * time.Millisecond}}, 2)
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "a", TaskType: "echo"}, tasks.Hooks{})
	n, _ := assigned(t, ns...)
	n.Result("a", "completed", "quick")
	if got := wait(t, ch); got.err != nil || got.out.Result != "quick" || got.out.Hedge != "" {
		t.Fatalf("%+v", got)
	}
	// The task has ended (not_needed): no second copy can follow.
	if n := gathered(t, reg, "switchyard_tasks_hedges_total"); n != 1 {
		t.Fatalf("switchyard_tasks_hedges_total = %v", n)
	}
	select {
	case m := <-others(ns, n)[0].Msgs:
		t.Fatalf("the other node was sent %s %v though the first answered in time", m.MsgType, m.Payload)
	default:
	}

	ch = run(t, r, context.Background(), tasks.Request{TaskID: "b", TaskType: "echo"}, tasks.Hooks{})
	first, _ := assigned(t, ns...)
	second, m := assigned(t, others(ns, first)...)
	if m.TaskID() != "b-hedge" {
		t.Fatalf("second copy %v", m.Payload)
	}
	first.Result("b", "completed", "late but first")
	got := wait(t, ch)
	if got.err != nil || got.out.Result != "late but first" || got.out.Hedge != tasks.HedgeFirst {
		t.Fatalf("%+v", got)
	}
	if c := second.Expect("task_cancel"); c.TaskID() != "b-hedge" || c.Payload["reason"] != "hedge lost" {
		t.Fatalf("the second copy's node got %v", c.Payload)
	}
}

// With no free second node the hedge does not wait for one: the first copy
// answers alone.
func TestHedgeNeedsAFreeNode(t *testing.T) {
	r, o, _, reg := retryPair(t, tasks.Config{Hedge: map[string]time.Duration{"echo": 30 * time.Millisecond}}, 0)
	only := nodetest.Connect(t, o.wsURL, nodetest.WithCancel(nodetest.Reg("good", "only", "echo")))
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "c", TaskType: "echo"}, tasks.Hooks{})
	only.Expect("task_assign")
	// The hedge went looking, found no free node and ended.
	waitUntil(t, func() bool { return gathered(t, reg, "switchyard_tasks_hedges_total") == 1 })
	only.Result("c", "completed", "alone")
	if got := wait(t, ch); got.err != nil || got.out.Result != "alone" || got.out.Hedge != "" {
		t.Fatalf("%+v", got)
	}
	if n := gathered(t, reg, "switchyard_tasks_hedges_total"); n != 1 {
		t.Fatalf("switchyard_tasks_hedges_total = %v: the task counted once (no_node)", n)
	}
}
