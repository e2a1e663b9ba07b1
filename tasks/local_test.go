package tasks_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/tasks"
)

// An async task runs on its instance's own nodes only (Request.LocalOnly):
// R sees O's node and routes a plain request there, but a local-only one
// gets no_node_available and O's node is never sent it; on O, the same
// local-only request reaches the node.
func TestLocalOnlyStaysOnThisInstance(t *testing.T) {
	r, o, _ := pair(t, tasks.Config{})
	n := nodetest.Connect(t, o.wsURL, nodetest.Reg("good", "w", "echo"))

	got := wait(t, run(t, r, context.Background(), tasks.Request{TaskID: "local", TaskType: "echo", Content: "x", LocalOnly: true}, tasks.Hooks{}))
	if code(got.err) != tasks.CodeNoNode {
		t.Fatalf("a local-only task with the only node elsewhere: %+v, want %s", got, tasks.CodeNoNode)
	}
	ch := run(t, r, context.Background(), tasks.Request{TaskID: "anywhere", TaskType: "echo", Content: "x"}, tasks.Hooks{})
	if m := n.Recv(5 * time.Second); m.MsgType != "task_assign" || m.TaskID() != "anywhere" {
		t.Fatalf("the node's next message is %s %v, want the assign of the plain task (never the local-only one)", m.MsgType, m.Payload)
	}
	n.Result("anywhere", "completed", "ok")
	if got := wait(t, ch); got.err != nil {
		t.Fatalf("plain task: %+v", got)
	}

	ch = run(t, o, context.Background(), tasks.Request{TaskID: "on-o", TaskType: "echo", Content: "x", LocalOnly: true}, tasks.Hooks{})
	if m := n.Expect("task_assign"); m.TaskID() != "on-o" {
		t.Fatalf("assign of %s", m.TaskID())
	}
	n.Result("on-o", "completed", "ok")
	if got := wait(t, ch); got.err != nil || got.out.NodeID != n.ID {
		t.Fatalf("local-only on the node's instance: %+v", got)
	}
}
