package clustertest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// The features work across instances: with the nodes on A and the
// requests on B, trust tiers, the OpenAI-compatible API, node benchmarks and
// splitting behave as they do on one instance.
func TestFeaturesAcrossInstances(t *testing.T) { OnEachRedis(t, testFeaturesAcrossInstances) }

func testFeaturesAcrossInstances(t *testing.T, cfg Config) {
	c := New(t, cfg)
	community := c.Account("comm")
	official := func() string {
		out, stderr, err := c.Run(30*time.Second, "accounts", "create", "--name", "off", "--trust", "official", "--database-url", c.DatabaseURL)
		if err != nil {
			t.Fatalf("accounts create --trust official: %v\n%s", err, stderr)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return lines[len(lines)-1]
	}()
	a := c.Start("A")
	b := c.Start("B")

	handler := sdk.HandlerFunc(func(_ context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if r, ok := probe(task); ok {
			return r, nil
		}
		if task.Type == "translate" {
			return sdk.Result{Text: strings.ToUpper(task.Content)}, nil
		}
		return sdk.Result{Text: "echo: " + task.Content, Usage: &sdk.Usage{PromptTokens: 2, CompletionTokens: 3}}, nil
	})
	ids := map[string]string{}
	for _, spec := range []struct{ name, key string }{{"c1", community}, {"c2", community}, {"o1", official}} {
		n := RunNode(t, sdk.NodeConfig{URL: a.WS(), APIKey: spec.key, Name: spec.name, MaxConcurrency: 4,
			Capabilities: []string{"echo", "translate"}, Handler: handler})
		ids[spec.name] = n.WaitRegistered(t, 5*time.Second)
	}
	listed := b.WaitNodes(5*time.Second, "the three nodes A holds", func(ns []NodeView) bool { return len(ns) == 3 })
	for _, v := range listed {
		want := "community"
		if v.NodeID == ids["o1"] {
			want = "official"
		}
		if v.Trust != want {
			t.Fatalf("B lists node %s (%s) with trust %q, want %q", v.NodeID, v.Name, v.Trust, want)
		}
	}
	ctx := testCtx(t, 60*time.Second)

	// Trust: a request demanding official nodes, by body or header, is only
	// ever served by the official node on A.
	for i := 0; i < 10; i++ {
		body := map[string]any{"task_type": "echo", "content": fmt.Sprint(i), "trust": "official"}
		r, err := b.Do(ctx, http.MethodPost, "/api/v1/request", community, body)
		if err != nil || r.Code != 200 {
			t.Fatalf("official request %d through B: %v %v", i, r, err)
		}
		var res struct {
			NodeID string `json:"node_id"`
		}
		if err := r.Decode(&res); err != nil || res.NodeID != ids["o1"] {
			t.Fatalf("official request %d served by %s, want the official node %s", i, res.NodeID, ids["o1"])
		}
	}

	// The OpenAI API on B: models of A's nodes, a chat completion served on A.
	r, err := b.Do(ctx, http.MethodGet, "/v1/models", "", nil)
	if err != nil || r.Code != 200 {
		t.Fatalf("GET /v1/models on B: %v %v", r, err)
	}
	if !strings.Contains(string(r.Body), `"gemmanet/echo"`) || !strings.Contains(string(r.Body), `"gemmanet/translate"`) {
		t.Fatalf("B's models do not list A's capabilities: %s", r.Body)
	}
	r, err = b.Do(ctx, http.MethodPost, "/v1/chat/completions", community, map[string]any{
		"model": "gemmanet/echo", "messages": []map[string]any{{"role": "user", "content": "hi there"}}})
	if err != nil || r.Code != 200 {
		t.Fatalf("chat completion through B: %v %v", r, err)
	}
	var chat struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := r.Decode(&chat); err != nil || chat.Object != "chat.completion" || len(chat.Choices) != 1 ||
		chat.Choices[0].Message.Content != "echo: hi there" || chat.Usage.TotalTokens != 5 {
		t.Fatalf("chat completion through B: %s", r.Body)
	}

	// Benchmarks: A asked its nodes for one; B shows it (from the shared store).
	Eventually(t, 10*time.Second, 50*time.Millisecond, func() (bool, string) {
		r, err := b.Do(ctx, http.MethodGet, "/api/v1/benchmark/"+ids["c1"], "", nil)
		if err != nil || r.Code != 200 {
			return false, fmt.Sprintf("GET benchmark on B: %v %v", r, err)
		}
		return strings.Contains(string(r.Body), `"benchmark_passed":true`), "B shows " + string(r.Body)
	})

	// Splitting: a long translate task through B runs in three parts on A's
	// nodes and comes back joined in order.
	var paras []string
	for i := 0; i < 6; i++ {
		paras = append(paras, fmt.Sprintf("paragraph %d %s", i, strings.Repeat("word ", 40)))
	}
	r, err = b.Do(ctx, http.MethodPost, "/api/v1/request", community, map[string]any{"task_type": "translate", "content": strings.Join(paras, "\n\n")})
	if err != nil || r.Code != 200 {
		t.Fatalf("split task through B: %v %v", r, err)
	}
	var split struct {
		Status string  `json:"status"`
		Result string  `json:"result"`
		NodeID *string `json:"node_id"`
		TaskID string  `json:"task_id"`
	}
	if err := r.Decode(&split); err != nil {
		t.Fatal(err)
	}
	want := strings.ToUpper(strings.TrimSpace(strings.Join(paras[0:2], "\n\n")) + "\n\n" +
		strings.TrimSpace(strings.Join(paras[2:4], "\n\n")) + "\n\n" + strings.TrimSpace(strings.Join(paras[4:6], "\n\n")))
	if split.Status != "completed" || split.Result != want || split.NodeID != nil {
		t.Fatalf("split task through B: status %s, node %v, result in order %v", split.Status, split.NodeID, split.Result == want)
	}
	// Rated on A (another instance than the one that ran it): every node that served a part.
	Eventually(t, 5*time.Second, 50*time.Millisecond, func() (bool, string) {
		r, err := a.Do(ctx, http.MethodPost, "/api/v1/rate", community, map[string]any{"task_id": split.TaskID, "rating": 5})
		if err != nil {
			return false, err.Error()
		}
		return r.Code == 200 && strings.Count(string(r.Body), "-") >= 3, fmt.Sprintf("rate on A: %d %s", r.Code, r.Body)
	})
}
