package tasks_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/tasks"
)

// Every task is counted once by outcome and timed once by mode, through
// the children the metrics keep for the common case (completed, plain,
// stream) as through a lookup for the rest.
func TestTaskMetricsCountEachOutcomeAndMode(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := bus.NewMemory()
	t.Cleanup(func() { _ = b.Close() })
	in := newInstance(t, "O", b, nil, tasks.Config{Registerer: reg})
	n := nodetest.Connect(t, in.wsURL, nodetest.Reg("good", "w", "echo"))

	for i, c := range []struct {
		id, status string
		stream     bool
	}{{"a", "completed", false}, {"b", "completed", true}, {"c", "failed", false}} {
		ch := run(t, in, context.Background(), tasks.Request{TaskID: c.id, TaskType: "echo", Content: "x", Stream: c.stream}, tasks.Hooks{})
		if m := n.Expect("task_assign"); m.TaskID() != c.id {
			t.Fatalf("task %d: assign of %s, want %s", i, m.TaskID(), c.id)
		}
		n.Result(c.id, c.status, "r")
		if got := wait(t, ch); got.err != nil || string(got.out.Status) != c.status {
			t.Fatalf("task %s: %+v, want %s", c.id, got, c.status)
		}
	}
	ch := run(t, in, context.Background(), tasks.Request{TaskID: "d", TaskType: "nothing-serves-this", Content: "x"}, tasks.Hooks{})
	if got := wait(t, ch); code(got.err) != tasks.CodeNoNode {
		t.Fatalf("task d: %+v, want %s", got, tasks.CodeNoNode)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	timed := map[string]uint64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "switchyard_tasks_total":
				counts[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			case "switchyard_tasks_duration_seconds":
				timed[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	want := map[string]float64{"completed": 2, "failed": 1, string(tasks.CodeNoNode): 1}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("switchyard_tasks_total{outcome=%q} = %v, want %v (all: %v)", k, counts[k], v, counts)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("switchyard_tasks_total has outcomes %v, want only %v", counts, want)
	}
	if timed["plain"] != 3 || timed["stream"] != 1 {
		t.Errorf("switchyard_tasks_duration_seconds counts %v, want plain 3 and stream 1", timed)
	}
}
