package server

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// capabilitiesOf reads GET /api/v1/capabilities (no key: it is public).
func (ta *testApp) capabilitiesOf(t *testing.T) map[string]capabilityItem {
	t.Helper()
	code, b, _, err := ta.do(http.MethodGet, "/api/v1/capabilities", "", nil)
	if err != nil || code != 200 {
		t.Fatalf("GET /api/v1/capabilities: %d %s %v", code, b, err)
	}
	var body struct {
		Capabilities []capabilityItem `json:"capabilities"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	out := map[string]capabilityItem{}
	for _, it := range body.Capabilities {
		out[it.TaskType] = it
	}
	return out
}

// The bar: while three requests wait on a busy single-slot node,
// another instance than the node's shows them waiting; then their service
// shows in served_1m, everywhere.
func TestCapabilitiesShowWaitingAcrossInstances(t *testing.T) {
	a, b := startPair(t, "demand", func(c *Config) { c.QueueTimeout = 20 * time.Second })
	key := a.account(t, "alice", "")
	n := connectNode(t, a.wsURL, map[string]any{"api_key": key, "name": "w", "capabilities": []string{"echo"}, "max_concurrency": 1})
	b.waitListed(t, n.ID, 0, 0)

	first := a.requestAsync(key, map[string]any{"task_type": "echo", "content": "first"})
	held := n.Expect("task_assign").TaskID()
	var waiting []<-chan reply
	for range 3 {
		waiting = append(waiting, a.requestAsync(key, map[string]any{"task_type": "echo", "content": "w"}))
	}
	// The figures are published once a second: poll B's answer.
	waitUntil(t, func() bool { return b.capabilitiesOf(t)["echo"].Waiting >= 3 })
	got := b.capabilitiesOf(t)["echo"]
	if got.Nodes != 1 || got.SlotsTotal != 1 || got.SlotsFree != 0 || got.OldestWaitMs <= 0 {
		t.Fatalf("B shows %+v; want 1 node, 1 slot, none free, a positive oldest wait", got)
	}

	n.Result(held, "completed", "first")
	for range 3 {
		m := n.Expect("task_assign")
		n.Result(m.TaskID(), "completed", "w")
	}
	for _, ch := range append(waiting, first) {
		if r := waitFor(t, ch, 5*time.Second); r.code != 200 {
			t.Fatalf("request: %d %s", r.code, r.body)
		}
	}
	waitUntil(t, func() bool {
		it := b.capabilitiesOf(t)["echo"]
		return it.Waiting == 0 && it.Served1m == 4 && it.SlotsFree == 1
	})
	if g := gaugeValue(t, b, "switchyard_capability_served_1m"); g != 4 {
		t.Fatalf("switchyard_capability_served_1m on B = %v, want 4", g)
	}
}

// The gauges keep a task type that had a node or demand in the last ten
// minutes (at zero once it went), and drop it after: the task_type label
// only takes the values in use.
func TestCapabilityGaugesForgetIdleTaskTypes(t *testing.T) {
	ta := startApp(t, nil)
	g := newDemandGauges(ta.App)
	now := time.Now()
	g.seen["recent"] = now.Add(-time.Minute)
	g.seen["stale"] = now.Add(-demandForget - time.Second)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(g)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_capability_nodes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			types[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if v, ok := types["recent"]; !ok || v != 0 || len(types) != 1 {
		t.Fatalf("switchyard_capability_nodes series %v; want only recent, at 0", types)
	}
	if _, ok := g.seen["stale"]; ok {
		t.Fatal("a task type idle for more than ten minutes is still remembered")
	}
}
