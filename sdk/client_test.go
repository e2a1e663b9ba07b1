package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// apiServer answers every request with h after recording it.
func apiServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body map[string]any)) (*sdk.Client, <-chan *http.Request) {
	t.Helper()
	reqs := make(chan *http.Request, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &body)
		}
		reqs <- r
		h(w, r, body)
	}))
	t.Cleanup(srv.Close)
	return sdk.NewClient(srv.URL+"/", "gn_key"), reqs
}

func TestClientRequest(t *testing.T) {
	var got map[string]any
	c, reqs := apiServer(t, func(w http.ResponseWriter, _ *http.Request, body map[string]any) {
		got = body
		fmt.Fprint(w, `{"task_id":"t1","status":"completed","result":"hi","node_id":"n1","processing_time_ms":12.6,"usage":{"prompt_tokens":1,"completion_tokens":2}}`)
	})
	res, err := c.Request(context.Background(), sdk.Request{TaskType: "chat", Content: "hello", Params: map[string]any{"k": "v"}, Trust: "official"})
	if err != nil {
		t.Fatal(err)
	}
	want := &sdk.TaskResult{TaskID: "t1", Status: "completed", Result: "hi", NodeID: "n1", ProcessingTimeMs: 13, Usage: &sdk.Usage{PromptTokens: 1, CompletionTokens: 2}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("result %+v, want %+v", res, want)
	}
	r := <-reqs
	if r.Method != http.MethodPost || r.URL.Path != "/api/v1/request" || r.Header.Get("Authorization") != "Bearer gn_key" {
		t.Errorf("request %s %s auth %q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
	}
	wantBody := map[string]any{"task_type": "chat", "content": "hello", "params": map[string]any{"k": "v"}, "trust": "official", "stream": false}
	if !reflect.DeepEqual(got, wantBody) {
		t.Errorf("body %v, want %v", got, wantBody)
	}
}

func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		fmt.Fprintf(w, "data: %s\n\n", e)
		w.(http.Flusher).Flush()
	}
}

func TestClientStream(t *testing.T) {
	var stream any
	c, _ := apiServer(t, func(w http.ResponseWriter, _ *http.Request, body map[string]any) {
		stream = body["stream"]
		w.Write([]byte(": connected\n\n"))
		sse(w, `{"delta":"he"}`, `{"delta":"llo"}`,
			`{"done":true,"result":{"task_id":"t1","status":"completed","result":"hello","node_id":"n1","processing_time_ms":5,"usage":null}}`)
	})
	var deltas []string
	res, err := c.Stream(context.Background(), sdk.Request{TaskType: "chat", Content: "x"}, func(d string) error {
		deltas = append(deltas, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stream != true {
		t.Errorf("request stream = %v, want true", stream)
	}
	if strings.Join(deltas, "|") != "he|llo" {
		t.Errorf("deltas %q", deltas)
	}
	if res.TaskID != "t1" || res.Result != "hello" || res.ProcessingTimeMs != 5 || res.Usage != nil {
		t.Errorf("result %+v", res)
	}
}

func TestClientStreamErrors(t *testing.T) {
	t.Run("error event", func(t *testing.T) {
		c, _ := apiServer(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			sse(w, `{"delta":"par"}`, `{"error":{"code":"node_disconnected","message":"node went away"},"task_id":"t9"}`)
		})
		_, err := c.Stream(context.Background(), sdk.Request{TaskType: "chat"}, nil)
		var ae *sdk.APIError
		if !errors.As(err, &ae) || *ae != (sdk.APIError{Status: 200, Code: "node_disconnected", Message: "node went away", TaskID: "t9"}) {
			t.Errorf("err = %#v", err)
		}
	})
	t.Run("cut short", func(t *testing.T) {
		c, _ := apiServer(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			sse(w, `{"delta":"par"}`)
		})
		if _, err := c.Stream(context.Background(), sdk.Request{TaskType: "chat"}, nil); !errors.Is(err, sdk.ErrStreamIncomplete) {
			t.Errorf("err = %v, want ErrStreamIncomplete", err)
		}
	})
	t.Run("onDelta error abandons", func(t *testing.T) {
		gone := make(chan struct{})
		c, _ := apiServer(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			sse(w, `{"delta":"a"}`)
			<-r.Context().Done() // the client hung up
			close(gone)
		})
		stop := errors.New("enough")
		if _, err := c.Stream(context.Background(), sdk.Request{TaskType: "chat"}, func(string) error { return stop }); !errors.Is(err, stop) {
			t.Errorf("err = %v, want the onDelta error", err)
		}
		<-gone
	})
	t.Run("HTTP error before the stream", func(t *testing.T) {
		c, _ := apiServer(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"code":"no_node","message":"no node for chat"},"detail":"no node for chat"}`)
		})
		_, err := c.Stream(context.Background(), sdk.Request{TaskType: "chat"}, nil)
		var ae *sdk.APIError
		if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "no_node" {
			t.Errorf("err = %#v", err)
		}
	})
}

func TestClientErrorBodies(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		header     string
		body       string
		want       sdk.APIError
		retryAfter time.Duration
	}{
		{"switchyard", 502, "", `{"error":{"code":"node_disconnected","message":"gone"},"detail":"gone"}`,
			sdk.APIError{Status: 502, Code: "node_disconnected", Message: "gone"}, 0},
		{"gemmanet detail", 401, "", `{"detail":"Invalid API key"}`,
			sdk.APIError{Status: 401, Message: "Invalid API key"}, 0},
		{"fastapi validation", 422, "", `{"detail":[{"loc":["body","task_type"],"msg":"field required"}]}`,
			sdk.APIError{Status: 422, Message: `[{"loc":["body","task_type"],"msg":"field required"}]`}, 0},
		{"openai", 503, "", `{"error":{"message":"no node","type":"server_error","code":"no_node_available"}}`,
			sdk.APIError{Status: 503, Code: "no_node_available", Message: "no node"}, 0},
		{"rate limited", 429, "7", `{"error":{"code":"rate_limited","message":"slow down"},"detail":"slow down"}`,
			sdk.APIError{Status: 429, Code: "rate_limited", Message: "slow down"}, 7 * time.Second},
		{"not json", 500, "", "upstream broke\n", sdk.APIError{Status: 500, Message: "upstream broke"}, 0},
		{"empty", 503, "soon", "", sdk.APIError{Status: 503, Message: "Service Unavailable"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := apiServer(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				if tc.header != "" {
					w.Header().Set("Retry-After", tc.header)
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			})
			_, err := c.Request(context.Background(), sdk.Request{TaskType: "chat"})
			var ae *sdk.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want an *APIError", err)
			}
			want := tc.want
			want.RetryAfter = tc.retryAfter
			if *ae != want {
				t.Errorf("APIError %+v, want %+v", *ae, want)
			}
			if !strings.Contains(ae.Error(), fmt.Sprint(tc.status)) {
				t.Errorf("Error() = %q lacks the status", ae.Error())
			}
		})
	}
}

func TestClientRetryAfterDate(t *testing.T) {
	c, _ := apiServer(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
		w.WriteHeader(429)
	})
	_, err := c.Status(context.Background())
	var ae *sdk.APIError
	if !errors.As(err, &ae) || ae.RetryAfter < 59*time.Minute || ae.RetryAfter > time.Hour {
		t.Errorf("err = %#v, want RetryAfter about an hour", err)
	}
}

func TestClientOtherEndpoints(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c, reqs := apiServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		switch r.URL.Path {
		case "/api/v1/rate":
			fmt.Fprintf(w, `{"status":"rated","node_ids":["n1"],"rating":%v}`, body["rating"])
		case "/api/v1/status":
			fmt.Fprint(w, `{"status":"running","version":"1.2.3","online_nodes":4,"total_tasks_today":99}`)
		case "/api/v1/nodes":
			if r.URL.Query().Get("capability") == "wrapped" {
				fmt.Fprint(w, `{"nodes":[{"node_id":"n2"}]}`)
				return
			}
			fmt.Fprint(w, `[{"node_id":"n1","name":"w","capabilities":["chat"],"languages":[],"model_info":{},"trust":"official","cpu_percent":12.5,"active_tasks":2,"max_concurrency":4,"online":true,"load":0.5}]`)
		case "/api/v1/tasks/a b":
			fmt.Fprint(w, `{"task_id":"a b","status":"completed","node_ids":["n1"],"created_at":"2026-01-02T03:04:05Z","finished_at":null,"processing_time_ms":40}`)
		default:
			http.NotFound(w, r)
		}
	})
	ctx := context.Background()

	rr, err := c.Rate(ctx, "t1", 5)
	if err != nil || !reflect.DeepEqual(rr, &sdk.RateResult{Status: "rated", NodeIDs: []string{"n1"}, Rating: 5}) {
		t.Errorf("Rate = %+v, %v", rr, err)
	}
	<-reqs
	st, err := c.Status(ctx)
	if err != nil || *st != (sdk.ServiceStatus{Status: "running", Version: "1.2.3", OnlineNodes: 4, TotalTasksToday: 99}) {
		t.Errorf("Status = %+v, %v", st, err)
	}
	<-reqs
	nodes, err := c.Nodes(ctx, "chat")
	want := []sdk.NodeInfo{{NodeID: "n1", Name: "w", Capabilities: []string{"chat"}, Languages: []string{}, ModelInfo: map[string]any{}, Trust: "official", CPUPercent: 12.5, ActiveTasks: 2, MaxConcurrency: 4, Online: true, Load: 0.5}}
	if err != nil || !reflect.DeepEqual(nodes, want) {
		t.Errorf("Nodes = %+v, %v", nodes, err)
	}
	if r := <-reqs; r.URL.RawQuery != "capability=chat" {
		t.Errorf("Nodes query %q", r.URL.RawQuery)
	}
	// Without online and load (GemmaNet sends neither): GemmaNet's defaults.
	if nodes, err := c.Nodes(ctx, "wrapped"); err != nil || len(nodes) != 1 || nodes[0].NodeID != "n2" || !nodes[0].Online || nodes[0].Load != 0 {
		t.Errorf("Nodes (wrapped) = %+v, %v", nodes, err)
	}
	<-reqs
	ti, err := c.Task(ctx, "a b")
	if err != nil || ti.TaskID != "a b" || !ti.CreatedAt.Equal(created) || ti.FinishedAt != nil || ti.ProcessingTimeMs != 40 || len(ti.NodeIDs) != 1 {
		t.Errorf("Task = %+v, %v", ti, err)
	}
	if _, err := c.Task(ctx, "missing"); err == nil {
		t.Error("Task of an unknown id: no error")
	}
}
