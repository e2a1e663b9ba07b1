package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/internal/sdktest"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

// These tests drive a real instance with the project's own SDK, node agent
// and client both, over real loopback sockets: what a user of switchyard
// runs, end to end.

// e2eNode is an SDK node agent running against a test instance.
type e2eNode = sdktest.Node

// runSDKNode starts an SDK node on the instance (its URL and a quiet logger
// filled in when cfg leaves them zero), stopped when the test ends.
func runSDKNode(t *testing.T, ta *testApp, cfg sdk.NodeConfig) *e2eNode {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = ta.wsURL
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	return sdktest.Run(t, cfg)
}

// e2eClient is an SDK client of the instance with its own connection pool,
// closed when the test ends.
func e2eClient(t *testing.T, ta *testApp, key string) *sdk.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return sdk.NewClient(ta.url, key, sdk.WithHTTPClient(&http.Client{Transport: tr}))
}

// e2eCtx bounds a test's calls, so that a hang fails instead of blocking.
func e2eCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// asAPIError fails the test unless err is an *sdk.APIError with this status and code.
func asAPIError(t *testing.T, err error, status int, code string) *sdk.APIError {
	t.Helper()
	var ae *sdk.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T), want *sdk.APIError %d %s", err, err, status, code)
	}
	if ae.Status != status || ae.Code != code {
		t.Fatalf("APIError %d %q (%s), want %d %q", ae.Status, ae.Code, ae.Message, status, code)
	}
	return ae
}

// logCapture is a slog handler that hands every record at info level or
// above to a channel, so a test can wait for what a component logs. It
// drops records when the channel is full rather than block the logger.
type logCapture struct{ ch chan slog.Record }

func newLogCapture() *logCapture { return &logCapture{ch: make(chan slog.Record, 4096)} }

func (h *logCapture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default:
	}
	return nil
}
func (h *logCapture) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCapture) WithGroup(string) slog.Handler      { return h }

// attr returns a record's attribute as text.
func attr(r slog.Record, key string) string {
	v := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// counterValue sums the series of a counter whose labels include labels.
func counterValue(t *testing.T, ta *testApp, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := ta.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			matched := 0
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
					matched++
				}
			}
			if matched == len(labels) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// The SDK's node agent and client against a real instance: plain and
// streamed tasks, rating, status, the node list and the task record.
func TestSDKEndToEnd(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	echoNode := runSDKNode(t, ta, sdk.NodeConfig{
		APIKey: key, Name: "echoer", Capabilities: []string{"echo"}, MaxConcurrency: 3,
		Languages: []string{"en", "de"}, ModelInfo: map[string]any{"model": "mirror"}, Handler: handlers.Echo(),
	})
	// The word node sends each word as a chunk and waits until the client
	// has it before it sends the next: if the server held chunks back, the
	// stream would stall and the test time out.
	ack := make(chan struct{})
	wordNode := runSDKNode(t, ta, sdk.NodeConfig{
		APIKey: key, Name: "words", Capabilities: []string{"words"},
		Handler: sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
			words := strings.SplitAfter(task.Content, " ")
			for _, w := range words {
				if err := emit(w); err != nil {
					return sdk.Result{}, err
				}
				if task.Stream {
					select {
					case <-ack:
					case <-ctx.Done():
						return sdk.Result{}, ctx.Err()
					case <-time.After(5 * time.Second):
						return sdk.Result{}, fmt.Errorf("chunk %q never reached the client", w)
					}
				}
			}
			return sdk.Result{Text: strings.ToUpper(task.Content), Usage: &sdk.Usage{PromptTokens: len(words), CompletionTokens: 2 * len(words)}}, nil
		}),
	})
	echoID, wordID := echoNode.WaitRegistered(t, 5*time.Second), wordNode.WaitRegistered(t, 5*time.Second)
	if echoID == wordID || echoID != echoNode.NodeID() {
		t.Fatalf("node ids: echo %q (NodeID %q), words %q", echoID, echoNode.NodeID(), wordID)
	}
	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)

	res, err := c.Request(ctx, sdk.Request{TaskType: "echo", Content: "hello, world"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "completed" || res.Result != "hello, world" || res.NodeID != echoID || res.TaskID == "" || res.Usage != nil {
		t.Fatalf("Request: %+v (usage %v); want completed \"hello, world\" from %s without usage", res, res.Usage, echoID)
	}

	var deltas []string
	sres, err := c.Stream(ctx, sdk.Request{TaskType: "words", Content: "one two three four"}, func(d string) error {
		deltas = append(deltas, d)
		select {
		case ack <- struct{}{}:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the handler did not wait for this delta")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"one ", "two ", "three ", "four"}; !slices.Equal(deltas, want) {
		t.Fatalf("deltas %q, want %q", deltas, want)
	}
	if sres.Status != "completed" || sres.Result != "ONE TWO THREE FOUR" || sres.NodeID != wordID || sres.TaskID == "" || sres.TaskID == res.TaskID ||
		sres.Usage == nil || *sres.Usage != (sdk.Usage{PromptTokens: 4, CompletionTokens: 8}) {
		t.Fatalf("Stream result %+v (usage %v)", sres, sres.Usage)
	}

	rr, err := c.Rate(ctx, res.TaskID, 5)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Status != "rated" || rr.Rating != 5 || !slices.Equal(rr.NodeIDs, []string{echoID}) {
		t.Fatalf("Rate: %+v", rr)
	}
	_, err = c.Rate(ctx, res.TaskID, 4)
	asAPIError(t, err, http.StatusConflict, "already_rated")

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "running" || st.OnlineNodes != 2 {
		t.Fatalf("Status: %+v, want running with 2 online nodes", st)
	}

	list, err := c.Nodes(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]sdk.NodeInfo{}
	for _, n := range list {
		byID[n.NodeID] = n
	}
	e, w := byID[echoID], byID[wordID]
	if len(list) != 2 || e.Name != "echoer" || e.MaxConcurrency != 3 || !slices.Equal(e.Capabilities, []string{"echo"}) ||
		!slices.Equal(e.Languages, []string{"en", "de"}) || e.ModelInfo["model"] != "mirror" ||
		w.Name != "words" || w.MaxConcurrency != 1 {
		t.Fatalf("Nodes: %+v", list)
	}
	only, err := c.Nodes(ctx, "words")
	if err != nil {
		t.Fatal(err)
	}
	if len(only) != 1 || only[0].NodeID != wordID {
		t.Fatalf("Nodes(words): %+v", only)
	}

	for _, r := range []*sdk.TaskResult{res, sres} {
		info, err := c.Task(ctx, r.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if info.TaskID != r.TaskID || info.Status != "completed" || !slices.Equal(info.NodeIDs, []string{r.NodeID}) ||
			info.FinishedAt == nil || info.FinishedAt.Before(info.CreatedAt) || info.ErrorCode != "" {
			t.Fatalf("Task(%s) right after the result: %+v", r.TaskID, info)
		}
	}
	_, err = c.Task(ctx, "no-such-task")
	asAPIError(t, err, http.StatusNotFound, "task_not_found")
}

// Params reach the SDK handler as the client sent them: nested objects,
// arrays, numbers of every kind, null, unicode.
func TestSDKParamsReachTheHandler(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	type seen struct {
		task   sdk.Task
		params string // as JSON, to be sure nothing aliases what the test compares
	}
	got := make(chan seen, 4)
	n := runSDKNode(t, ta, sdk.NodeConfig{
		APIKey: key, Name: "p", Capabilities: []string{"params"},
		Handler: sdk.HandlerFunc(func(_ context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
			b, err := json.Marshal(task.Params)
			got <- seen{*task, string(b)}
			return sdk.Result{Text: "ok"}, err
		}),
	})
	n.WaitRegistered(t, 5*time.Second)
	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)

	params := map[string]any{
		"temperature": 0.7, "max_tokens": 256, "negative": -42, "tiny": 1.5e-7, "max_safe": 9007199254740991,
		"flag": false, "nothing": nil, "text": "ünïcode \"quoted\"\n\ttabbed ✓",
		"style": map[string]any{
			"tone":   "dry",
			"limits": map[string]any{"words": 120, "tags": []any{"a", 2, true, nil, 3.25}, "none": map[string]any{}},
			"empty":  []any{},
		},
	}
	// What any JSON decoder must make of what the client sent.
	raw, _ := json.Marshal(params)
	var want map[string]any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}

	for _, stream := range []bool{false, true} {
		req := sdk.Request{TaskType: "params", Content: "c", Params: params}
		var err error
		if stream {
			_, err = c.Stream(ctx, req, nil)
		} else {
			_, err = c.Request(ctx, req)
		}
		if err != nil {
			t.Fatal(err)
		}
		s := waitFor(t, got, 5*time.Second)
		if !reflect.DeepEqual(s.task.Params, want) {
			t.Fatalf("stream %v: handler params\n%s\nwant\n%s", stream, s.params, raw)
		}
		if s.task.Type != "params" || s.task.Content != "c" || s.task.Stream != stream || s.task.ID == "" {
			t.Fatalf("task %+v", s.task)
		}
	}

	// No params: an empty map, never nil.
	if _, err := c.Request(ctx, sdk.Request{TaskType: "params", Content: "c"}); err != nil {
		t.Fatal(err)
	}
	if s := waitFor(t, got, 5*time.Second); s.task.Params == nil || len(s.task.Params) != 0 {
		t.Fatalf("params without any sent: %#v", s.task.Params)
	}
}

// A handler's error fails the task: a 200 with status failed and the
// error's text, or in a stream an error event with code task_failed.
func TestSDKHandlerErrorFailsTheTask(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := runSDKNode(t, ta, sdk.NodeConfig{
		APIKey: key, Name: "broken", Capabilities: []string{"broken"},
		Handler: sdk.HandlerFunc(func(_ context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
			if err := emit("partial "); err != nil {
				return sdk.Result{}, err
			}
			return sdk.Result{Text: "ignored"}, fmt.Errorf("model exploded on %q: out of cheese", task.Content)
		}),
	})
	nodeID := n.WaitRegistered(t, 5*time.Second)
	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)

	res, err := c.Request(ctx, sdk.Request{TaskType: "broken", Content: "x"})
	if err != nil {
		t.Fatalf("a handler failure must be a 200 TaskResult, got %v", err)
	}
	if res.Status != "failed" || res.Result != `model exploded on "x": out of cheese` || res.NodeID != nodeID || res.Usage != nil {
		t.Fatalf("Request: %+v", res)
	}

	var deltas []string
	_, err = c.Stream(ctx, sdk.Request{TaskType: "broken", Content: "y"}, func(d string) error {
		deltas = append(deltas, d)
		return nil
	})
	ae := asAPIError(t, err, http.StatusOK, "task_failed")
	if !strings.Contains(ae.Message, "out of cheese") || ae.TaskID == "" {
		t.Fatalf("stream error %+v", ae)
	}
	if !slices.Equal(deltas, []string{"partial "}) {
		t.Fatalf("deltas before the failure: %q", deltas)
	}

	info, err := c.Task(ctx, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != "failed" {
		t.Fatalf("record of the failed task: %+v", info)
	}
	// Reputation shows both failures (the cache is updated as tasks end,
	// with no event to wait on).
	var rep struct {
		TotalTasks  int64   `json:"total_tasks"`
		SuccessRate float64 `json:"success_rate"`
	}
	waitUntil(t, func() bool {
		ta.call(t, "GET", "/api/v1/reputation/"+nodeID, "", nil, &rep)
		return rep.TotalTasks == 2
	})
	if rep.SuccessRate != 0 {
		t.Fatalf("reputation after two failures: %+v", rep)
	}
}

// blocker is a handler that blocks every task whose content is "block"
// until its context ends, reporting the task id when it starts and when
// its context is cancelled; any other task is answered at once.
type blocker struct {
	started   chan string
	cancelled chan string
}

func newBlocker() *blocker {
	return &blocker{started: make(chan string, 16), cancelled: make(chan string, 16)}
}

func (b *blocker) Handle(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
	if task.Content != "block" {
		return sdk.Result{Text: "served " + task.Content}, nil
	}
	if err := emit("started"); err != nil {
		return sdk.Result{}, err
	}
	b.started <- task.ID
	<-ctx.Done()
	b.cancelled <- task.ID
	return sdk.Result{}, ctx.Err()
}

// A client that gives up cancels the handler's context, and the node's
// only slot is free for the next task.
func TestSDKClientCancelReachesTheHandler(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	b := newBlocker()
	n := runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "w", Capabilities: []string{"echo"}, MaxConcurrency: 1, Handler: b})
	n.WaitRegistered(t, 5*time.Second)
	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)

	// A plain request whose context is cancelled.
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	errc := async(func() error {
		_, err := c.Request(rctx, sdk.Request{TaskType: "echo", Content: "block"})
		return err
	})
	id := waitFor(t, b.started, 5*time.Second)
	rcancel()
	if err := waitFor(t, errc, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Request after its context was cancelled: %v", err)
	}
	if got := waitFor(t, b.cancelled, 5*time.Second); got != id {
		t.Fatalf("cancelled task %s, want %s", got, id)
	}
	if res, err := c.Request(ctx, sdk.Request{TaskType: "echo", Content: "next"}); err != nil || res.Result != "served next" {
		t.Fatalf("after the cancel: %+v, %v", res, err)
	}

	// A stream the client abandons from its delta callback.
	errStop := errors.New("enough")
	errc = async(func() error {
		_, err := c.Stream(ctx, sdk.Request{TaskType: "echo", Content: "block"}, func(string) error { return errStop })
		return err
	})
	id = waitFor(t, b.started, 5*time.Second)
	if err := waitFor(t, errc, 5*time.Second); !errors.Is(err, errStop) {
		t.Fatalf("Stream abandoned by its callback: %v", err)
	}
	if got := waitFor(t, b.cancelled, 5*time.Second); got != id {
		t.Fatalf("cancelled task %s, want %s", got, id)
	}
	if res, err := c.Request(ctx, sdk.Request{TaskType: "echo", Content: "after stream"}); err != nil || res.Result != "served after stream" {
		t.Fatalf("after the abandoned stream: %+v, %v", res, err)
	}
}

// A task past its deadline is a 504 timeout for the client (an error event
// in a stream) and cancels the handler's context.
func TestSDKDeadlineCancelsTheHandler(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ta := startApp(t, func(c *Config) { c.TaskTimeout = timeout })
	key := ta.account(t, "alice", "")
	b := newBlocker()
	n := runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "w", Capabilities: []string{"echo"}, MaxConcurrency: 1, Handler: b})
	n.WaitRegistered(t, 5*time.Second)
	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)

	start := time.Now()
	_, err := c.Request(ctx, sdk.Request{TaskType: "echo", Content: "block"})
	took := time.Since(start)
	asAPIError(t, err, http.StatusGatewayTimeout, "timeout")
	if took < timeout || took > timeout+2*time.Second {
		t.Fatalf("timeout after %s, want about %s", took, timeout)
	}
	id := waitFor(t, b.started, time.Second)
	if got := waitFor(t, b.cancelled, 5*time.Second); got != id {
		t.Fatalf("cancelled task %s, want %s", got, id)
	}

	// A stream: the deadline runs between chunks; after "started" the
	// handler is silent.
	var deltas []string
	_, err = c.Stream(ctx, sdk.Request{TaskType: "echo", Content: "block"}, func(d string) error {
		deltas = append(deltas, d)
		return nil
	})
	asAPIError(t, err, http.StatusOK, "timeout")
	id = waitFor(t, b.started, time.Second)
	if got := waitFor(t, b.cancelled, 5*time.Second); got != id || !slices.Equal(deltas, []string{"started"}) {
		t.Fatalf("cancelled task %s (want %s), deltas %q", got, id, deltas)
	}
	if res, err := c.Request(ctx, sdk.Request{TaskType: "echo", Content: "next"}); err != nil || res.Result != "served next" {
		t.Fatalf("after the timeouts: %+v, %v", res, err)
	}
}

// A second node with the same key and name replaces the first, whose Run
// then stops for good with ErrReplaced; the node is listed once.
func TestSDKDuplicateIdentityStopsTheOldNode(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	first := runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "twin", Capabilities: []string{"echo"}, Handler: handlers.Echo()})
	id := first.WaitRegistered(t, 5*time.Second)
	second := runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "twin", Capabilities: []string{"echo"}, Handler: handlers.Echo()})
	if id2 := second.WaitRegistered(t, 5*time.Second); id2 != id {
		t.Fatalf("same key and name: ids %s and %s", id, id2)
	}
	select {
	case <-first.Stopped():
		if !errors.Is(first.Err(), sdk.ErrReplaced) {
			t.Fatalf("replaced node's Run returned %v, want ErrReplaced", first.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the replaced node's Run did not return")
	}
	select {
	case <-first.Registrations():
		t.Fatal("the replaced node registered again")
	case <-second.Stopped():
		t.Fatalf("the new node's Run returned %v", second.Err())
	default:
	}

	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)
	list, err := c.Nodes(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].NodeID != id {
		t.Fatalf("nodes listed: %+v, want %s once", list, id)
	}
	if res, err := c.Request(ctx, sdk.Request{TaskType: "echo", Content: "x"}); err != nil || res.NodeID != id {
		t.Fatalf("the new connection does not serve: %+v, %v", res, err)
	}
}

// Refused by the handshake limit (HTTP 403), the SDK node keeps retrying
// with backoff, never gives up on its own, and stops when told to.
func TestSDKNodeKeepsRetryingWhenHandshakesAreLimited(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.HandshakeRate = 2 })
	key := ta.account(t, "alice", "")
	for i := 0; i < 2; i++ { // the whole budget; it refills at 2 a minute
		if _, _, err := nodetest.Dial(t, ta.wsURL); err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
	}
	refused := func() float64 {
		return counterValue(t, ta, "switchyard_http_requests_total", map[string]string{"route": "/ws/node", "code": "403"})
	}
	if got := refused(); got != 0 {
		t.Fatalf("%v handshakes refused before the node started", got)
	}

	logs := newLogCapture()
	n := runSDKNode(t, ta, sdk.NodeConfig{
		APIKey: key, Name: "patient", Capabilities: []string{"echo"}, Handler: handlers.Echo(),
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: slog.New(logs),
	})
	const retries = 6
	deadline := time.After(10 * time.Second)
	for seen := 0; seen < retries; {
		select {
		case r := <-logs.ch:
			switch r.Message {
			case "connection failed; retrying":
				if err := attr(r, "err"); !strings.Contains(err, "403") {
					t.Fatalf("attempt %d failed with %q, want HTTP 403", seen+1, err)
				}
				seen++
			case "registered":
				t.Fatal("the node registered although the handshake budget is spent")
			}
		case <-n.Stopped():
			t.Fatalf("Run gave up after %d refusals: %v", seen, n.Err())
		case <-deadline:
			t.Fatalf("only %d retries within 10s", seen)
		}
	}
	select {
	case <-n.Stopped():
		t.Fatalf("Run gave up: %v", n.Err())
	default:
	}
	// The server refused each attempt with 403. The counter is incremented
	// after the answer is written, so it may trail the node's log a little.
	waitUntil(t, func() bool { return refused() >= retries })
	if err := n.Stop(t); err != nil {
		t.Fatalf("Run after its context was cancelled: %v, want nil", err)
	}
}

// A node that stops in the middle of tasks fails them at once: 502
// node_disconnected for a plain request, the same code as an error event
// in a stream, in well under 2.5s.
func TestSDKNodeStopMidTaskIs502(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	b := newBlocker()
	n := runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "w", Capabilities: []string{"echo"}, MaxConcurrency: 2, Handler: b})
	n.WaitRegistered(t, 5*time.Second)
	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)

	plain := async(func() error {
		_, err := c.Request(ctx, sdk.Request{TaskType: "echo", Content: "block"})
		return err
	})
	streamed := async(func() error {
		_, err := c.Stream(ctx, sdk.Request{TaskType: "echo", Content: "block"}, nil)
		return err
	})
	waitFor(t, b.started, 5*time.Second)
	waitFor(t, b.started, 5*time.Second)

	start := time.Now()
	n.Cancel() // the node closes its socket
	asAPIError(t, waitFor(t, plain, 5*time.Second), http.StatusBadGateway, "node_disconnected")
	asAPIError(t, waitFor(t, streamed, 5*time.Second), http.StatusOK, "node_disconnected")
	if took := time.Since(start); took >= 2500*time.Millisecond {
		t.Fatalf("clients learned of the disconnect after %s, want under 2.5s", took)
	}
	t.Logf("disconnect reported in %s", time.Since(start))
	if err := n.Stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	_, err := c.Request(ctx, sdk.Request{TaskType: "echo", Content: "x"})
	asAPIError(t, err, http.StatusNotFound, "no_node_available")
}

// Five SDK nodes of max_concurrency 4 and 200 concurrent SDK clients: every
// request succeeds, each reaches exactly one handler call, and no node ever
// runs more than 4 at once or is sent a task while all its slots are busy.
func TestSDKManyNodesManyClients(t *testing.T) {
	const (
		nodeCount   = 5
		concurrency = 4
		requests    = 200
		chunks      = 3
	)
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	type gauge struct{ cur, peak, calls atomic.Int64 }
	gauges := make([]*gauge, nodeCount)
	logs := newLogCapture()
	ids := map[string]int{}
	var nodes []*e2eNode
	for i := range nodeCount {
		g := &gauge{}
		gauges[i] = g
		inner := handlers.Sleep(time.Millisecond, 20*time.Millisecond, chunks)
		wrapped := sdk.HandlerFunc(func(ctx context.Context, task *sdk.Task, emit func(string) error) (sdk.Result, error) {
			g.calls.Add(1)
			cur := g.cur.Add(1)
			defer g.cur.Add(-1)
			for {
				p := g.peak.Load()
				if cur <= p || g.peak.CompareAndSwap(p, cur) {
					break
				}
			}
			return inner.Handle(ctx, task, emit)
		})
		nodes = append(nodes, runSDKNode(t, ta, sdk.NodeConfig{
			APIKey: key, Name: fmt.Sprintf("sleeper-%d", i), Capabilities: []string{"sleep"},
			MaxConcurrency: concurrency, Handler: wrapped, Logger: slog.New(logs),
		}))
	}
	for i, n := range nodes {
		ids[n.WaitRegistered(t, 5*time.Second)] = i
	}
	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)

	var wg sync.WaitGroup
	var ok atomic.Int64
	servedBy := make([]atomic.Int64, nodeCount)
	begin := make(chan struct{})
	for i := range requests {
		wg.Go(func() {
			<-begin
			req := sdk.Request{TaskType: "sleep", Content: fmt.Sprintf("req %d", i)}
			var res *sdk.TaskResult
			var err error
			var deltas strings.Builder
			stream := i%2 == 0
			if stream {
				res, err = c.Stream(ctx, req, func(d string) error { deltas.WriteString(d); return nil })
			} else {
				res, err = c.Request(ctx, req)
			}
			if err != nil {
				t.Errorf("request %d (stream %v): %v", i, stream, err)
				return
			}
			idx, known := ids[res.NodeID]
			if res.Status != "completed" || !known || !strings.Contains(res.Result, "slept ") {
				t.Errorf("request %d: %+v", i, res)
				return
			}
			if stream && (deltas.String() != "chunk 1/3\nchunk 2/3\nchunk 3/3\n" || !strings.HasPrefix(res.Result, deltas.String())) {
				t.Errorf("request %d: deltas %q, result %q", i, deltas.String(), res.Result)
				return
			}
			servedBy[idx].Add(1)
			ok.Add(1)
		})
	}
	close(begin)
	wg.Wait()
	if ok.Load() != requests {
		t.Fatalf("%d of %d requests succeeded", ok.Load(), requests)
	}
	var calls, peak int64
	for i, g := range gauges {
		t.Logf("node %d: %d tasks (%d answers), at most %d at once", i, g.calls.Load(), servedBy[i].Load(), g.peak.Load())
		if g.peak.Load() > concurrency {
			t.Errorf("node %d ran %d handlers at once, over its max_concurrency %d", i, g.peak.Load(), concurrency)
		}
		if g.calls.Load() != servedBy[i].Load() {
			t.Errorf("node %d: %d handler calls for %d answers", i, g.calls.Load(), servedBy[i].Load())
		}
		calls += g.calls.Load()
		peak = max(peak, g.peak.Load())
	}
	if calls != requests {
		t.Errorf("%d handler calls for %d requests", calls, requests)
	}
	if peak != concurrency {
		t.Errorf("no node ever ran %d tasks at once (peak %d): the load did not reach the limit this test checks", concurrency, peak)
	}
	// The SDK queues a task the server sends while every slot is busy, so the
	// handler counts alone could not see an over-commit; its warning does.
	var overCommitted []string
	for len(logs.ch) > 0 {
		if r := <-logs.ch; strings.Contains(r.Message, "every slot is busy") {
			overCommitted = append(overCommitted, attr(r, "task_id"))
		}
	}
	if len(overCommitted) > 0 {
		t.Errorf("the server sent %d tasks to a node whose slots were all busy, e.g. %s", len(overCommitted), overCommitted[0])
	}
}

// A Go SDK handler that returns sdk.ErrUnavailable fails the task for its
// node's sake: it runs again on the other node, and the client gets that
// node's answer.
func TestSDKHandlerUnavailableIsRetried(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	refused := make(chan string, 1)
	sick := runSDKNode(t, ta, sdk.NodeConfig{
		APIKey: key, Name: "sick", Capabilities: []string{"gpu"},
		Handler: sdk.HandlerFunc(func(_ context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
			refused <- task.ID
			return sdk.Result{}, fmt.Errorf("model not loaded: %w", sdk.ErrUnavailable)
		}),
	})
	sickID := sick.WaitRegistered(t, 5*time.Second)
	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)
	// The sick node is the only one: it gets the task, and with no other
	// node its answer is the client's, a failure.
	res, err := c.Request(ctx, sdk.Request{TaskType: "gpu", Content: "x"})
	if err != nil || res.Status != "failed" || !strings.Contains(res.Result, "model not loaded") || res.NodeID != sickID {
		t.Fatalf("with no other node: %+v, %v", res, err)
	}
	<-refused
	well := runSDKNode(t, ta, sdk.NodeConfig{
		APIKey: key, Name: "well", Capabilities: []string{"gpu"},
		Handler: sdk.HandlerFunc(func(_ context.Context, task *sdk.Task, _ func(string) error) (sdk.Result, error) {
			return sdk.Result{Text: "done " + task.Content}, nil
		}),
	})
	wellID := well.WaitRegistered(t, 5*time.Second)
	// Whichever node gets it first, the answer is the well node's.
	for i := range 4 {
		res, err := c.Request(ctx, sdk.Request{TaskType: "gpu", Content: fmt.Sprint(i)})
		if err != nil || res.Status != "completed" || res.NodeID != wellID || res.Result != fmt.Sprint("done ", i) {
			t.Fatalf("request %d: %+v, %v; want the well node's answer", i, res, err)
		}
		select {
		case <-refused:
			if res.Attempts != 2 {
				t.Fatalf("request %d was refused by the sick node but answered in %d attempts", i, res.Attempts)
			}
		default:
		}
	}
}
