package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// overviewDoc is the part of GET /admin/api/overview the tests read.
type overviewDoc struct {
	Instance  string `json:"instance_id"`
	Instances []struct {
		ID            string `json:"id"`
		Name          string `json:"name"`
		Mode          string `json:"mode"`
		Nodes         int    `json:"nodes"`
		TasksInFlight int    `json:"tasks_in_flight"`
		Ready         bool   `json:"ready"`
		Self          bool   `json:"self"`
	} `json:"instances"`
	Nodes []struct {
		NodeID       string `json:"node_id"`
		Name         string `json:"name"`
		AccountID    string `json:"account_id"`
		Instance     string `json:"instance"`
		InstanceName string `json:"instance_name"`
		State        string `json:"state"`
		StateReason  string `json:"state_reason"`
		Reputation   *struct {
			Score      float64 `json:"score"`
			TotalTasks int64   `json:"total_tasks"`
		} `json:"reputation"`
	} `json:"nodes"`
	TaskTypes []struct {
		TaskType   string  `json:"task_type"`
		Nodes      int     `json:"nodes"`
		SlotsFree  int     `json:"slots_free"`
		Served1m   int     `json:"served_1m"`
		Finished5m int     `json:"finished_5m"`
		Failed5m   int     `json:"failed_5m"`
		ErrorRate  float64 `json:"error_rate"`
		P50Ms      float64 `json:"p50_ms"`
		P95Ms      float64 `json:"p95_ms"`
		Finished   []int   `json:"finished"`
	} `json:"task_types"`
	Failures []struct {
		TaskType     string `json:"task_type"`
		Code         string `json:"code"`
		NodeID       string `json:"node_id"`
		Instance     string `json:"instance"`
		InstanceName string `json:"instance_name"`
	} `json:"failures"`
	Warnings []string `json:"warnings"`
}

func (ta *testApp) overview(t *testing.T) overviewDoc {
	t.Helper()
	var o overviewDoc
	if code, _ := ta.call(t, http.MethodGet, "/admin/api/overview", testAdmin, nil, &o); code != 200 {
		t.Fatalf("GET /admin/api/overview: %d", code)
	}
	return o
}

// One instance: the overview lists it, its node, and the figures of the
// requests it served and failed. The route needs the admin token, and
// exists only with one set, like the page.
func TestOverviewOneInstance(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.AdminToken, c.InstanceName = testAdmin, "solo" })
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "w1", "echo"))
	for _, status := range []string{"completed", "completed", "failed"} {
		answerOne(t, ta, n, key, "echo", status)
	}
	var e apiErr
	if code, _ := ta.call(t, "POST", "/api/v1/request", key, map[string]any{"task_type": "nobody-serves-this", "content": "x"}, &e); code != 404 {
		t.Fatalf("a request no node serves: %d %+v", code, e)
	}

	o := ta.overview(t)
	if len(o.Instances) != 1 || !o.Instances[0].Self || o.Instances[0].Name != "solo" || !o.Instances[0].Ready ||
		o.Instances[0].Mode != "single" || o.Instances[0].Nodes != 1 {
		t.Fatalf("instances %+v", o.Instances)
	}
	if len(o.Nodes) != 1 || o.Nodes[0].NodeID != n.ID || o.Nodes[0].InstanceName != "solo" || o.Nodes[0].State != "serving" ||
		o.Nodes[0].AccountID == "" || o.Nodes[0].Reputation == nil {
		t.Fatalf("nodes %+v", o.Nodes)
	}
	types := map[string]int{}
	for i, tt := range o.TaskTypes {
		types[tt.TaskType] = i
	}
	echo := o.TaskTypes[types["echo"]]
	if echo.Nodes != 1 || echo.Finished5m != 3 || echo.Failed5m != 1 || echo.ErrorRate != 0.333 || echo.P50Ms <= 0 ||
		echo.P95Ms < echo.P50Ms || len(echo.Finished) != 30 || echo.Finished[29] == 0 {
		t.Fatalf("echo figures %+v", echo)
	}
	if _, ok := types["nobody-serves-this"]; !ok {
		t.Fatalf("the type no node serves is missing: %+v", o.TaskTypes)
	}
	if len(o.Failures) != 2 || o.Failures[0].Code != "no_node_available" || o.Failures[1].Code != "task_failed" ||
		o.Failures[1].NodeID != n.ID || o.Failures[1].InstanceName != "solo" {
		t.Fatalf("failures %+v", o.Failures)
	}

	if code, _, _, _ := ta.do(http.MethodGet, "/admin/api/overview", key, nil); code != 401 {
		t.Fatalf("the overview with an API key: %d, want 401", code)
	}
	// The public capabilities keep their shape: no latency, no instance.
	code, body, _, _ := ta.do(http.MethodGet, "/api/v1/capabilities", "", nil)
	if code != 200 || strings.Contains(string(body), "p95") || strings.Contains(string(body), ta.instanceID) {
		t.Fatalf("capabilities %d %s", code, body)
	}
	var caps struct {
		Capabilities []map[string]any `json:"capabilities"`
	}
	if err := json.Unmarshal(body, &caps); err != nil || len(caps.Capabilities) == 0 || len(caps.Capabilities[0]) != 7 {
		t.Fatalf("capabilities items changed shape: %s", body)
	}

	plain := startApp(t, nil)
	for _, p := range []string{"/admin/api/overview", "/dashboard", "/dashboard/app.js"} {
		if code, _, _, _ := plain.do(http.MethodGet, p, testAdmin, nil); code != 404 {
			t.Errorf("GET %s without an admin token configured: %d, want 404", p, code)
		}
	}
}

// The page is served from the binary without the token (it is a sign-in
// form), under a policy that allows its own files only.
func TestDashboardFiles(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.AdminToken = testAdmin })
	for path, want := range map[string]string{
		"/dashboard": "text/html", "/dashboard/": "text/html", "/dashboard/app.js": "javascript",
		"/dashboard/style.css": "text/css", "/dashboard/favicon.svg": "image/svg+xml",
	} {
		code, body, h, err := ta.do(http.MethodGet, path, "", nil)
		if err != nil || code != 200 || !strings.Contains(h.Get("Content-Type"), want) || len(body) == 0 {
			t.Errorf("GET %s: %d %q %v", path, code, h.Get("Content-Type"), err)
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
	}
	if code, _, _, _ := ta.do(http.MethodGet, "/dashboard/nope.js", "", nil); code != 404 {
		t.Errorf("a file that is not there: %d", code)
	}
}

// Two instances: the overview on B lists A (and itself), A's node, and the
// figures and failures of requests that landed on A, merged with B's.
func TestOverviewAcrossInstances(t *testing.T) {
	a, b := startPair(t, "overview", func(c *Config) { c.AdminToken = testAdmin })
	key := a.account(t, "alice", "")
	n := connectNode(t, a.wsURL, reg(key, "wa", "echo"))
	b.waitListed(t, n.ID, 0, 0)
	answerOne(t, a, n, key, "echo", "completed")
	answerOne(t, a, n, key, "echo", "failed")
	answerOne(t, b, n, key, "echo", "completed")

	// A publishes its figures within a second.
	var o overviewDoc
	deadline := time.Now().Add(5 * time.Second)
	for {
		o = b.overview(t)
		if len(o.TaskTypes) == 1 && o.TaskTypes[0].Finished5m == 3 && len(o.Failures) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's overview after 5s: %+v", o)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if o.Instance != b.instanceID || len(o.Instances) != 2 || len(o.Warnings) != 0 {
		t.Fatalf("instances %+v warnings %v", o.Instances, o.Warnings)
	}
	for _, in := range o.Instances {
		if in.Self != (in.ID == b.instanceID) || !in.Ready || in.Mode != "multi-instance" {
			t.Fatalf("instance %+v", in)
		}
		if in.ID == a.instanceID && in.Nodes != 1 {
			t.Fatalf("A's nodes: %+v", in)
		}
	}
	if len(o.Nodes) != 1 || o.Nodes[0].NodeID != n.ID || o.Nodes[0].Instance != a.instanceID || o.Nodes[0].Reputation == nil {
		t.Fatalf("nodes %+v", o.Nodes)
	}
	echo := o.TaskTypes[0]
	if echo.Failed5m != 1 || echo.P50Ms <= 0 || echo.P95Ms < echo.P50Ms || echo.Nodes != 1 {
		t.Fatalf("echo %+v", echo)
	}
	f := o.Failures[0]
	if f.Code != "task_failed" || f.Instance != a.instanceID || f.NodeID != n.ID {
		t.Fatalf("failure %+v", f)
	}
}
