package server

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// Nodes declare a version and labels at registration (the Go SDK's
// NodeConfig); the listing shows them on every instance, and a request
// that requires labels, in its body (node_labels) or in X-Node-Labels (the
// only way on the OpenAI routes), reaches only nodes that have them,
// through either instance.
func TestNodeLabelsRouteRequests(t *testing.T) {
	a, b := startPair(t, "labels", nil)
	key := a.account(t, "labels", "")
	named := func(name string) sdk.Handler {
		return sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
			return sdk.Result{Text: name}, nil
		})
	}
	nodes := []struct {
		ta      *testApp
		name    string
		version string
		labels  map[string]string
	}{
		{a, "eu", "2.0.0", map[string]string{"region": "eu-west", "gpu": "l4"}},
		{b, "us", "1.9.0", map[string]string{"region": "us-east"}},
		{a, "plain", "", nil}, // GemmaNet-like: neither
	}
	for _, n := range nodes {
		runSDKNode(t, n.ta, sdk.NodeConfig{APIKey: key, Name: n.name, Capabilities: []string{"echo", "chat"}, MaxConcurrency: 4,
			Version: n.version, Labels: n.labels, Handler: named(n.name)}).WaitRegistered(t, 5*time.Second)
	}

	// Both instances list all three, with what each declared.
	want := map[string]string{"eu": `2.0.0 {"gpu":"l4","region":"eu-west"}`, "us": `1.9.0 {"region":"us-east"}`, "plain": " null"}
	listed := func(ta *testApp) map[string]string {
		var list []struct {
			Name    string            `json:"name"`
			Version string            `json:"version"`
			Labels  map[string]string `json:"labels"`
		}
		ta.call(t, "GET", "/api/v1/nodes", key, nil, &list)
		got := map[string]string{}
		for _, n := range list {
			raw, _ := json.Marshal(n.Labels)
			got[n.Name] = n.Version + " " + string(raw)
		}
		return got
	}
	for _, ta := range []*testApp{a, b} {
		// The other instance's directory entry is on its way.
		waitUntilFor(t, 10*time.Second, func() bool { return maps.Equal(listed(ta), want) })
	}

	served := func(ta *testApp, body map[string]any, header string) (int, string) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", ta.url+"/api/v1/request", strings.NewReader(string(b)))
		req.Header.Set("Authorization", "Bearer "+key)
		if header != "" {
			req.Header.Set("X-Node-Labels", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res struct {
			Result string `json:"result"`
			Error  struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&res)
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, res.Error.Code + ": " + res.Error.Message
		}
		return resp.StatusCode, res.Result
	}
	for i := range 10 {
		ta := []*testApp{a, b}[i%2]
		if code, got := served(ta, map[string]any{"task_type": "echo", "content": "x", "node_labels": map[string]string{"region": "eu-west"}}, ""); code != 200 || got != "eu" {
			t.Fatalf("node_labels region=eu-west through %s: %d %q, want the eu node", ta.url, code, got)
		}
		if code, got := served(ta, map[string]any{"task_type": "echo", "content": "x"}, "region=us-east"); code != 200 || got != "us" {
			t.Fatalf("X-Node-Labels region=us-east through %s: %d %q, want the us node", ta.url, code, got)
		}
		// Body and header join: both labels, one node.
		if code, got := served(ta, map[string]any{"task_type": "echo", "content": "x", "node_labels": map[string]string{"gpu": "l4"}}, " region = eu-west "); code != 200 || got != "eu" {
			t.Fatalf("gpu=l4 and region=eu-west through %s: %d %q, want the eu node", ta.url, code, got)
		}
	}
	if code, got := served(b, map[string]any{"task_type": "echo", "content": "x", "node_labels": map[string]string{"region": "eu-west", "gpu": "a100"}}, ""); code != 404 ||
		!strings.HasPrefix(got, "no_node_available: ") || !strings.Contains(got, "with the labels gpu=a100,region=eu-west") {
		t.Fatalf("labels no node has: %d %q, want 404 no_node_available naming them", code, got)
	}

	// The OpenAI routes take the header.
	for _, ta := range []*testApp{a, b} {
		req, _ := http.NewRequest("POST", ta.url+"/v1/chat/completions", strings.NewReader(`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Node-Labels", "region=us-east")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var chat struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		err = json.NewDecoder(resp.Body).Decode(&chat)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(chat.Choices) != 1 || chat.Choices[0].Message.Content != "us" {
			t.Fatalf("chat with X-Node-Labels through %s: %d %+v %v, want the us node's answer", ta.url, resp.StatusCode, chat, err)
		}
	}

	// Bad labels are refused, saying what is wrong; nothing runs.
	for _, c := range []struct {
		body   map[string]any
		header string
		want   string
	}{
		{map[string]any{"node_labels": map[string]string{"Region": "eu"}}, "", "must match"},
		{map[string]any{"node_labels": map[string]string{"region": ""}}, "", "must be 1-128 characters"},
		{map[string]any{"node_labels": []string{"region"}}, "", "node_labels has the wrong type"},
		{nil, "region", `"region" is not key=value`},
		{nil, "region=eu,region=us", `names "region" twice`},
		{map[string]any{"node_labels": map[string]string{"region": "eu"}}, "region=us", `"region" is "eu" in node_labels and "us" in X-Node-Labels`},
	} {
		body := map[string]any{"task_type": "echo", "content": "x"}
		for k, v := range c.body {
			body[k] = v
		}
		if code, got := served(a, body, c.header); code != 422 || !strings.Contains(got, c.want) {
			t.Errorf("body %v, header %q: %d %q, want 422 saying %q", c.body, c.header, code, got, c.want)
		}
	}
	var e apiErr
	if code, _ := a.call(t, "POST", "/api/v1/tasks", key, map[string]any{"task_type": "echo", "content": "x", "node_labels": map[string]string{"region": "eu-west"}}, &e); code != 422 ||
		!strings.Contains(e.Error.Message, "not to async tasks") {
		t.Errorf("an async task with node_labels: %d %+v, want 422", code, e)
	}

	// Each instance counts its own nodes by version.
	if got := metricValue(t, a, `switchyard_nodes_connected_by_version{version="2.0.0"}`); got != 1 {
		t.Errorf("instance a counts %v nodes of version 2.0.0, want 1", got)
	}
	if got := metricValue(t, a, `switchyard_nodes_connected_by_version{version="unknown"}`); got != 1 {
		t.Errorf("instance a counts %v nodes of no version, want 1", got)
	}
	if got := metricValue(t, b, `switchyard_nodes_connected_by_version{version="1.9.0"}`); got != 1 {
		t.Errorf("instance b counts %v nodes of version 1.9.0, want 1", got)
	}
}
