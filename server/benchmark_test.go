package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/sdk"
)

func benchmarkOf(t *testing.T, ta *testApp, nodeID string) map[string]any {
	t.Helper()
	var out struct {
		NodeID    string         `json:"node_id"`
		Benchmark map[string]any `json:"benchmark"`
	}
	if code, _ := ta.call(t, "GET", "/api/v1/benchmark/"+nodeID, "", nil, &out); code != 200 || out.NodeID != nodeID {
		t.Fatalf("GET /api/v1/benchmark: %d %+v", code, out)
	}
	return out.Benchmark
}

// A node is asked for a benchmark right after it registers; its answer is
// timed by the coordinator and stored; an answer nobody asked for is ignored.
func TestBenchmarkSolicitedAndUnsolicited(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.NoNodeBenchmarks = false })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	if b := benchmarkOf(t, ta, n.ID); b != nil {
		t.Fatalf("benchmark before the node answered: %v", b)
	}
	m := n.Expect("benchmark")
	prompts, _ := m.Payload["prompts"].([]any)
	if len(prompts) != len(nodes.BenchmarkPrompts) {
		t.Fatalf("benchmark prompts %v", m.Payload)
	}
	results := []map[string]any{}
	for _, p := range prompts {
		results = append(results, map[string]any{"prompt": p, "response": "ok " + p.(string), "time_ms": 1, "success": true})
	}
	time.Sleep(60 * time.Millisecond) // the node's own pace: what the coordinator must measure
	n.MustSend("benchmark_result", map[string]any{"node_id": n.ID, "results": results})
	var b map[string]any
	waitUntil(t, func() bool { b = benchmarkOf(t, ta, n.ID); return b != nil })
	if b["benchmark_passed"] != true || len(b["results"].([]any)) != 3 || b["node_id"] != n.ID {
		t.Fatalf("profile %v", b)
	}
	// 3 prompts answered after >= 60 ms, timed by the coordinator: >= 20 ms each.
	if avg := b["avg_response_ms"].(float64); avg < 20 {
		t.Fatalf("avg_response_ms %v: not the coordinator's own measurement", avg)
	}
	// An answer nobody asked for changes nothing.
	before := counterSum(t, ta, "switchyard_nodes_invalid_messages_total")
	n.MustSend("benchmark_result", map[string]any{"node_id": n.ID, "results": []map[string]any{{"prompt": "x", "response": "", "time_ms": 1, "success": false}}})
	waitUntil(t, func() bool { return counterSum(t, ta, "switchyard_nodes_invalid_messages_total") > before })
	if again := benchmarkOf(t, ta, n.ID); again["benchmark_passed"] != true || again["timestamp"] != b["timestamp"] {
		t.Fatalf("an unsolicited result replaced the profile: %v", again)
	}
}

// A node that never answered is not asked twice at once; once its profile
// is older than the maximum age it is asked again (on its heartbeat).
func TestBenchmarkRedoneWhenOld(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.NoNodeBenchmarks = false; c.BenchmarkMaxAge = time.Second })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	n.Expect("benchmark")
	n.MustSend("heartbeat", map[string]any{"node_id": n.ID, "active_tasks": 0, "cpu_percent": 1})
	n.MustSend("benchmark_result", map[string]any{"node_id": n.ID, "results": []map[string]any{{"prompt": "p", "response": "r", "time_ms": 1, "success": true}}})
	waitUntil(t, func() bool { return benchmarkOf(t, ta, n.ID) != nil })
	select {
	case m := <-n.Msgs:
		t.Fatalf("a second request while the first was outstanding, or for a fresh profile: %s", m.MsgType)
	default:
	}
	// Profiles carry whole seconds; wait until this one is past the 1 s age.
	time.Sleep(2100 * time.Millisecond)
	n.MustSend("heartbeat", map[string]any{"node_id": n.ID, "active_tasks": 0, "cpu_percent": 1})
	n.Expect("benchmark")
}

// A node that fails its benchmark is routed to less often (GemmaNet's −0.2).
func TestBenchmarkFailureLowersRouting(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.NoNodeBenchmarks = false })
	key := ta.account(t, "alice", "")
	isPrompt := func(s string) bool {
		for _, p := range nodes.BenchmarkPrompts {
			if s == p {
				return true
			}
		}
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ids := map[string]string{}
	var mu sync.Mutex
	registered := make(chan struct{}, 2)
	for _, name := range []string{"good", "bad"} {
		node, err := sdk.NewNode(sdk.NodeConfig{
			URL: ta.wsURL, APIKey: key, Name: name, Capabilities: []string{"echo"}, MaxConcurrency: 4, Logger: testLogger(t),
			OnRegistered: func(id string) { mu.Lock(); ids[name] = id; mu.Unlock(); registered <- struct{}{} },
			Handler: sdk.HandlerFunc(func(_ context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
				if name == "bad" && isPrompt(task.Content) {
					return sdk.Result{}, errors.New("model not loaded")
				}
				return sdk.Result{Text: task.Content}, nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = node.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	<-registered
	<-registered
	for _, name := range []string{"good", "bad"} {
		waitUntil(t, func() bool { return benchmarkOf(t, ta, ids[name]) != nil })
	}
	if b := benchmarkOf(t, ta, ids["bad"]); b["benchmark_passed"] != false {
		t.Fatalf("the failing node's profile: %v", b)
	}
	served := map[string]int{}
	const requests = 100
	for i := 0; i < requests; i++ {
		var res result
		if code, _ := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "echo", "content": fmt.Sprint(i)}, &res); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
		served[res.NodeID]++
	}
	t.Logf("served: good %d, bad %d", served[ids["good"]], served[ids["bad"]])
	if served[ids["bad"]] > requests/10 || served[ids["good"]]+served[ids["bad"]] != requests {
		t.Fatalf("the node that failed its benchmark served %d of %d", served[ids["bad"]], requests)
	}
}

func TestBenchmarkProfileIsLenient(t *testing.T) {
	p := nodes.NewBenchmarkProfile("n", json.RawMessage(`{"results":[{"prompt":"a","response":"`+strings.Repeat("x", 600)+`","time_ms":"5","success":true},{"prompt":7,"success":"yes"},{},{},{}]}`), 300*time.Millisecond, time.Unix(1700000000, 0))
	if len(p.Results) != 3 || len([]rune(p.Results[0].Response)) != 500 || p.Results[0].TimeMs != 5 || p.BenchmarkPassed || p.AvgResponseMs != 100 || p.Timestamp != 1700000000 {
		t.Fatalf("%+v", p)
	}
	if q := nodes.NewBenchmarkProfile("n", json.RawMessage(`garbage`), time.Second, time.Now()); q.BenchmarkPassed || len(q.Results) != 0 {
		t.Fatalf("garbage: %+v", q)
	}
}
