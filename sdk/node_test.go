package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
	"github.com/switchyard-dev/switchyard/sdk/internal/fakeserver"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// waitCtx bounds how long a test waits for an event that should come.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// harness runs one Node against a fake server.
type harness struct {
	t      *testing.T
	srv    *fakeserver.Server
	node   *sdk.Node
	cancel context.CancelFunc
	done   chan error
}

// start runs a node against a new fake server with test defaults (echo
// handler, fast backoff, no heartbeats or pings unless asked), changed by
// mutate.
func start(t *testing.T, mutate func(*sdk.NodeConfig)) *harness {
	t.Helper()
	return startOn(t, fakeserver.New(), mutate)
}

// startOn is start with a server the test has already set up.
func startOn(t *testing.T, srv *fakeserver.Server, mutate func(*sdk.NodeConfig)) *harness {
	t.Helper()
	cfg := sdk.NodeConfig{
		URL:               srv.URL,
		APIKey:            "gn_0123456789abcdef0123456789abcdef",
		Name:              "worker-1",
		Capabilities:      []string{"echo", "chat"},
		Handler:           handlers.Echo(),
		HeartbeatInterval: time.Hour,
		PingInterval:      time.Hour,
		MinBackoff:        5 * time.Millisecond,
		MaxBackoff:        20 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	n, err := sdk.NewNode(cfg)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, srv: srv, node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
		srv.Close()
	})
	return h
}

// result waits for Run to return on its own.
func (h *harness) result() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		h.done <- err // for Cleanup
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not return")
		return nil
	}
}

// stop cancels Run and returns its error.
func (h *harness) stop() error {
	h.cancel()
	return h.result()
}

// registered accepts the next connection and registers it as nodeID.
func (h *harness) registered(ctx context.Context, nodeID string) *fakeserver.Conn {
	h.t.Helper()
	c, err := h.srv.Accept(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := c.Accept(ctx, nodeID); err != nil {
		h.t.Fatal(err)
	}
	return c
}

func assign(t *testing.T, ctx context.Context, c *fakeserver.Conn, p wire.TaskAssignPayload) {
	t.Helper()
	if err := c.Send(ctx, wire.MsgTaskAssign, p); err != nil {
		t.Fatal(err)
	}
}

func TestRegistration(t *testing.T) {
	ctx := waitCtx(t)
	registeredAs := make(chan string, 1)
	h := start(t, func(c *sdk.NodeConfig) {
		c.Languages = []string{"en", "de"}
		c.ModelInfo = map[string]any{"model": "tiny"}
		c.MaxConcurrency = 3
		c.OnRegistered = func(id string) { registeredAs <- id }
	})
	c, err := h.srv.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if env.MsgType != wire.MsgNodeRegister {
		t.Fatalf("first message is %s, want node_register", env.MsgType)
	}
	if _, err := uuid.Parse(env.MsgID); err != nil {
		t.Errorf("msg_id %q is not a UUID", env.MsgID)
	}
	if ts, err := time.Parse(time.RFC3339Nano, env.Timestamp); err != nil || !strings.HasSuffix(env.Timestamp, "Z") || time.Since(ts) > time.Minute {
		t.Errorf("timestamp %q is not a current ISO-8601 UTC time with Z (%v)", env.Timestamp, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(env.Payload, &raw); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"api_key":         "gn_0123456789abcdef0123456789abcdef",
		"name":            "worker-1",
		"capabilities":    []any{"echo", "chat"},
		"languages":       []any{"en", "de"},
		"model_info":      map[string]any{"model": "tiny"},
		"max_concurrency": 3.0,
		"features":        []any{"task_cancel"},
	}
	for k, v := range want {
		if got, _ := json.Marshal(raw[k]); string(got) != mustJSON(t, v) {
			t.Errorf("node_register %s = %s, want %s", k, got, mustJSON(t, v))
		}
	}
	if err := c.Send(ctx, wire.MsgNodeRegistered, wire.RegisteredPayload{NodeID: "node-abc"}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-registeredAs:
		if id != "node-abc" {
			t.Errorf("OnRegistered(%q), want node-abc", id)
		}
	case <-ctx.Done():
		t.Fatal("OnRegistered was not called")
	}
	if got := h.node.NodeID(); got != "node-abc" {
		t.Errorf("NodeID() = %q", got)
	}
	if err := h.stop(); err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHeartbeatReportsActiveTasks(t *testing.T) {
	ctx := waitCtx(t)
	started := make(chan struct{})
	h := start(t, func(c *sdk.NodeConfig) {
		c.HeartbeatInterval = 5 * time.Millisecond
		c.Handler = sdk.HandlerFunc(func(ctx context.Context, _ *sdk.Task, _ func(string) error) (sdk.Result, error) {
			close(started)
			<-ctx.Done()
			return sdk.Result{}, ctx.Err()
		})
	})
	c := h.registered(ctx, "n1")
	var hb wire.HeartbeatPayload
	if _, err := c.NextOf(ctx, wire.MsgHeartbeat, &hb); err != nil {
		t.Fatal(err)
	}
	if hb.NodeID != "n1" || hb.ActiveTasks != 0 || hb.CPUPercent < 0 || hb.CPUPercent > 100 {
		t.Errorf("idle heartbeat = %+v", hb)
	}
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "t1", TaskType: "echo"})
	<-started
	for hb.ActiveTasks != 1 {
		if _, err := c.NextOf(ctx, wire.MsgHeartbeat, &hb); err != nil {
			t.Fatalf("no heartbeat with active_tasks 1: %v", err)
		}
	}
}

func TestPlainTask(t *testing.T) {
	ctx := waitCtx(t)
	got := make(chan *sdk.Task, 1)
	h := start(t, func(c *sdk.NodeConfig) {
		c.Handler = sdk.HandlerFunc(func(_ context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
			got <- task
			if err := emit("not streamed"); err != nil {
				return sdk.Result{}, err
			}
			return sdk.Result{Text: "re: " + task.Content, Usage: &sdk.Usage{PromptTokens: 3, CompletionTokens: 5}}, nil
		})
	})
	c := h.registered(ctx, "n1")
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "t1", TaskType: "chat", Content: "hi", Params: json.RawMessage(`{"temperature":0.5}`)})

	env, err := c.NextOf(ctx, wire.MsgTaskResult, nil)
	if err != nil {
		t.Fatal(err)
	}
	var res wire.TaskResultPayload
	if err := env.DecodePayload(&res); err != nil {
		t.Fatal(err)
	}
	want := wire.TaskResultPayload{TaskID: "t1", NodeID: "n1", Status: "completed", Result: "re: hi", Usage: &sdk.Usage{PromptTokens: 3, CompletionTokens: 5}}
	res.ProcessingTimeMs = 0
	if mustJSON(t, res) != mustJSON(t, want) {
		t.Errorf("task_result = %s, want %s", env.Payload, mustJSON(t, want))
	}
	task := <-got
	if task.ID != "t1" || task.Type != "chat" || task.Content != "hi" || task.Stream || task.Params["temperature"] != 0.5 {
		t.Errorf("handler got %+v", task)
	}
}

func TestStreamingTaskSendsChunksInOrderThenResult(t *testing.T) {
	ctx := waitCtx(t)
	h := start(t, func(c *sdk.NodeConfig) {
		c.Handler = sdk.HandlerFunc(func(_ context.Context, _ *sdk.Task, emit func(string) error) (sdk.Result, error) {
			for _, d := range []string{"a", "b", "", "c"} {
				if err := emit(d); err != nil {
					return sdk.Result{}, err
				}
			}
			return sdk.Result{Text: "abc"}, nil
		})
	})
	c := h.registered(ctx, "n1")
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "t1", TaskType: "echo", Stream: true})
	for _, want := range []string{"a", "b", "c"} {
		var ch wire.TaskChunkPayload
		if _, err := c.NextOf(ctx, wire.MsgTaskChunk, &ch); err != nil {
			t.Fatal(err)
		}
		if ch.TaskID != "t1" || ch.Delta != want {
			t.Errorf("chunk = %+v, want delta %q", ch, want)
		}
	}
	var res wire.TaskResultPayload
	env, err := c.NextOf(ctx, wire.MsgTaskResult, &res)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "completed" || res.Result != "abc" || res.Usage != nil {
		t.Errorf("task_result = %s", env.Payload)
	}
	if !strings.Contains(string(env.Payload), `"usage":null`) {
		t.Errorf("usage should be null when the handler reports none: %s", env.Payload)
	}
}

func TestFailingHandler(t *testing.T) {
	for name, handler := range map[string]sdk.HandlerFunc{
		"error": func(context.Context, *sdk.Task, func(string) error) (sdk.Result, error) {
			return sdk.Result{Text: "partial", Usage: &sdk.Usage{}}, errors.New("model exploded")
		},
		"panic": func(context.Context, *sdk.Task, func(string) error) (sdk.Result, error) {
			panic("model exploded")
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := waitCtx(t)
			h := start(t, func(c *sdk.NodeConfig) { c.Handler = handler })
			c := h.registered(ctx, "n1")
			for _, id := range []string{"t1", "t2"} { // the node keeps serving
				assign(t, ctx, c, wire.TaskAssignPayload{TaskID: id, TaskType: "echo"})
				var res wire.TaskResultPayload
				if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
					t.Fatal(err)
				}
				if res.TaskID != id || res.Status != "failed" || !strings.Contains(res.Result, "model exploded") || res.Usage != nil {
					t.Errorf("task_result = %+v", res)
				}
			}
		})
	}
}

func TestProcessingTimeIsTheHandlersTime(t *testing.T) {
	ctx := waitCtx(t)
	h := start(t, func(c *sdk.NodeConfig) { c.Handler = handlers.Sleep(30*time.Millisecond, 30*time.Millisecond, 0) })
	c := h.registered(ctx, "n1")
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "t1", TaskType: "echo"})
	var res wire.TaskResultPayload
	if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
		t.Fatal(err)
	}
	if res.ProcessingTimeMs < 30 || res.ProcessingTimeMs > 2000 {
		t.Errorf("processing_time_ms = %d for a 30 ms handler", res.ProcessingTimeMs)
	}
}

func TestAtMostMaxConcurrencyHandlers(t *testing.T) {
	ctx := waitCtx(t)
	var running, peak atomic.Int32
	h := start(t, func(c *sdk.NodeConfig) {
		c.MaxConcurrency = 2
		c.Handler = sdk.HandlerFunc(func(ctx context.Context, _ *sdk.Task, _ func(string) error) (sdk.Result, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			// Long enough that every assign below arrives while the first
			// handlers still run: without the limit all six would overlap.
			time.Sleep(20 * time.Millisecond)
			return sdk.Result{Text: "ok"}, nil
		})
	})
	c := h.registered(ctx, "n1")
	const tasks = 6
	for i := range tasks {
		assign(t, ctx, c, wire.TaskAssignPayload{TaskID: string(rune('a' + i)), TaskType: "echo"})
	}
	for range tasks {
		var res wire.TaskResultPayload
		if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
			t.Fatal(err)
		}
		if res.Status != "completed" {
			t.Errorf("task_result = %+v", res)
		}
	}
	if p := peak.Load(); p > 2 || p < 1 {
		t.Errorf("%d handlers ran at once, want at most 2", p)
	}
}

// blocking is a handler that reports its start and its cancellation.
func blocking(started chan<- string, cancelled chan<- string) sdk.HandlerFunc {
	return func(ctx context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
		if task.Content == "quick" {
			return sdk.Result{Text: "quick"}, nil
		}
		started <- task.ID
		<-ctx.Done()
		cancelled <- task.ID
		return sdk.Result{Text: "too late"}, nil
	}
}

func TestTaskCancelCancelsTheHandlerAndSendsNoResult(t *testing.T) {
	ctx := waitCtx(t)
	started, cancelled := make(chan string, 1), make(chan string, 1)
	h := start(t, func(c *sdk.NodeConfig) { c.Handler = blocking(started, cancelled) })
	c := h.registered(ctx, "n1")
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "slow", TaskType: "echo", Stream: true})
	<-started
	if err := c.Send(ctx, wire.MsgTaskCancel, wire.TaskCancelPayload{TaskID: "slow", Reason: "client_gone"}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-cancelled:
		if id != "slow" {
			t.Fatalf("cancelled %q", id)
		}
	case <-ctx.Done():
		t.Fatal("task_cancel did not cancel the handler's context")
	}
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "next", TaskType: "echo", Content: "quick"})
	var res wire.TaskResultPayload
	if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
		t.Fatal(err)
	}
	if res.TaskID != "next" {
		t.Errorf("got a result for %q, want only the one for next", res.TaskID)
	}
	// Everything the node sends before it closes: no result for "slow".
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	rest, err := c.Rest(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("the node closed with %v, want a normal closure", err)
	}
	for _, env := range rest {
		t.Errorf("unexpected message after the cancel: %s %s", env.MsgType, env.Payload)
	}
}

func TestStopCancelsRunningHandlersAndWaitsForThem(t *testing.T) {
	ctx := waitCtx(t)
	started, cancelled := make(chan string, 2), make(chan string, 2)
	h := start(t, func(c *sdk.NodeConfig) {
		c.MaxConcurrency = 2
		c.Handler = blocking(started, cancelled)
	})
	c := h.registered(ctx, "n1")
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "t1", TaskType: "echo"})
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "t2", TaskType: "echo"})
	<-started
	<-started
	if err := h.stop(); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	// Run has returned, so both handlers must have seen their cancellation.
	if len(cancelled) != 2 {
		t.Errorf("%d handlers saw the cancellation before Run returned, want 2", len(cancelled))
	}
	rest, err := c.Rest(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure || len(rest) != 0 {
		t.Errorf("after stop: messages %v, close %v; want none and a normal closure", rest, err)
	}
}

func TestBenchmark(t *testing.T) {
	ctx := waitCtx(t)
	types := make(chan string, 2)
	h := start(t, func(c *sdk.NodeConfig) {
		c.Handler = sdk.HandlerFunc(func(_ context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
			types <- task.Type
			if task.Content == "bad" {
				return sdk.Result{}, errors.New("cannot")
			}
			return sdk.Result{Text: strings.ToUpper(task.Content)}, nil
		})
	})
	c := h.registered(ctx, "n1")
	if err := c.Send(ctx, wire.MsgBenchmark, wire.BenchmarkPayload{Prompts: []string{"hello", "bad"}}); err != nil {
		t.Fatal(err)
	}
	var br wire.BenchmarkResultPayload
	if _, err := c.NextOf(ctx, wire.MsgBenchmarkResult, &br); err != nil {
		t.Fatal(err)
	}
	if br.NodeID != "n1" || len(br.Results) != 2 ||
		br.Results[0] != (wire.BenchmarkItem{Prompt: "hello", Response: "HELLO", TimeMs: br.Results[0].TimeMs, Success: true}) ||
		br.Results[1].Prompt != "bad" || br.Results[1].Success {
		t.Errorf("benchmark_result = %+v", br)
	}
	if typ := <-types; typ != "echo" {
		t.Errorf("benchmark task type %q, want the first capability", typ)
	}
}

func TestIgnoresMalformedAndUnknownMessages(t *testing.T) {
	ctx := waitCtx(t)
	h := start(t, nil)
	c := h.registered(ctx, "n1")
	for _, raw := range []string{`not json`, `{"payload":{}}`, `{"msg_type":"task_assign","payload":{"task_id":""}}`, `{"msg_type":"surprise"}`} {
		if err := c.SendRaw(ctx, []byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "t1", TaskType: "echo", Content: "still here"})
	var res wire.TaskResultPayload
	if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
		t.Fatal(err)
	}
	if res.Result != "still here" {
		t.Errorf("task_result = %+v", res)
	}
}

// A task_assign the node cannot decode (a number beyond
// float64 in params) is answered at once with status "rejected" naming the
// task, instead of being dropped to time out on the server; the handler
// never sees it and the node keeps serving.
func TestUndecodableAssignIsRejected(t *testing.T) {
	ctx := waitCtx(t)
	h := start(t, nil)
	c := h.registered(ctx, "n1")
	for _, raw := range []string{
		`{"msg_type":"task_assign","payload":{"task_id":"bad","task_type":"echo","content":"x","params":{"n":1e999999}}}`,
		`{"msg_type":"task_assign","payload":{"task_id":"worse","task_type":"echo","content":7}}`,
	} {
		if err := c.SendRaw(ctx, []byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]wire.TaskResultPayload{}
	for range 2 {
		var res wire.TaskResultPayload
		if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
			t.Fatal(err)
		}
		got[res.TaskID] = res
	}
	if r := got["bad"]; r.Status != wire.StatusRejected || !strings.Contains(r.Result, "1e999999") || r.NodeID == "" {
		t.Errorf("task_result for the params out of range = %+v", r)
	}
	if r := got["worse"]; r.Status != wire.StatusRejected || !strings.Contains(r.Result, "content") {
		t.Errorf("task_result for content of the wrong type = %+v", r)
	}
	assign(t, ctx, c, wire.TaskAssignPayload{TaskID: "t1", TaskType: "echo", Content: "still here"})
	var res wire.TaskResultPayload
	if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
		t.Fatal(err)
	}
	if res.TaskID != "t1" || res.Status != wire.StatusCompleted || res.Result != "still here" {
		t.Errorf("task_result = %+v", res)
	}
}

func TestResultOverTheMessageLimitFailsTheTask(t *testing.T) {
	ctx := waitCtx(t)
	h := start(t, func(c *sdk.NodeConfig) {
		c.Handler = sdk.HandlerFunc(func(_ context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
			if task.Content == "big" {
				return sdk.Result{Text: strings.Repeat("x", sdk.MaxMessageBytes)}, nil
			}
			return sdk.Result{Text: "small"}, nil
		})
	})
	c := h.registered(ctx, "n1")
	for _, tc := range []struct {
		content string
		status  wire.ResultStatus
	}{{"big", wire.StatusFailed}, {"small", wire.StatusCompleted}} {
		assign(t, ctx, c, wire.TaskAssignPayload{TaskID: tc.content, TaskType: "echo", Content: tc.content})
		var res wire.TaskResultPayload
		if _, err := c.NextOf(ctx, wire.MsgTaskResult, &res); err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.status {
			t.Errorf("%s result: status %q (%.80s)", tc.content, res.Status, res.Result)
		}
	}
}

func TestNewNodeRefusesBadConfig(t *testing.T) {
	ok := sdk.NodeConfig{URL: "ws://localhost:1/ws/node", APIKey: "k", Name: "n", Capabilities: []string{"echo"}, Handler: handlers.Echo()}
	if _, err := sdk.NewNode(ok); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tc := range []struct {
		want   string
		mutate func(*sdk.NodeConfig)
	}{
		{"URL", func(c *sdk.NodeConfig) { c.URL = "" }},
		{"ws://", func(c *sdk.NodeConfig) { c.URL = "ftp://x/ws/node" }},
		{"APIKey", func(c *sdk.NodeConfig) { c.APIKey = "" }},
		{"Name", func(c *sdk.NodeConfig) { c.Name = strings.Repeat("n", 65) }},
		{"Capabilities", func(c *sdk.NodeConfig) { c.Capabilities = nil }},
		{"capability", func(c *sdk.NodeConfig) { c.Capabilities = []string{"-bad"} }},
		{"language", func(c *sdk.NodeConfig) { c.Languages = []string{""} }},
		{"ModelInfo", func(c *sdk.NodeConfig) { c.ModelInfo = map[string]any{"x": strings.Repeat("y", 2048)} }},
		{"Handler", func(c *sdk.NodeConfig) { c.Handler = nil }},
		{"Version", func(c *sdk.NodeConfig) { c.Version = strings.Repeat("v", 65) }},
		{"label key", func(c *sdk.NodeConfig) { c.Labels = map[string]string{"Region": "eu"} }},
		{"label \"region\"", func(c *sdk.NodeConfig) { c.Labels = map[string]string{"region": ""} }},
		{"Labels", func(c *sdk.NodeConfig) {
			c.Labels = map[string]string{}
			for i := range 17 {
				c.Labels[fmt.Sprint("k", i)] = "v"
			}
		}},
		{"negative", func(c *sdk.NodeConfig) { c.MaxConcurrency = -1 }},
		{"MinBackoff", func(c *sdk.NodeConfig) { c.MinBackoff, c.MaxBackoff = time.Minute, time.Second }},
	} {
		c := ok
		tc.mutate(&c)
		if _, err := sdk.NewNode(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewNode with bad %s: err = %v", tc.want, err)
		}
	}
}
