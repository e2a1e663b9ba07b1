package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http keeps idle client connections' goroutines until they time out.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// testApp is a running instance on a loopback port.
type testApp struct {
	*App
	url    string
	wsURL  string
	cancel context.CancelFunc
	done   chan error
}

// testLogger writes the instance's log to stderr at debug level when
// SWITCHYARD_TEST_LOG is set; otherwise it keeps the info-level log and
// prints it only if the test fails, so a failure that shows once in a
// hundred runs arrives with what the instance said.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SWITCHYARD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var buf lockedBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(&buf, nil))
}

// lockedBuffer is a bytes.Buffer the instance's goroutines write to at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startApp starts an instance with test-friendly settings; mutate adjusts
// them. It stops when the test ends.
func startApp(t testing.TB, mutate func(*Config)) *testApp {
	t.Helper()
	return startAppWith(t, mutate, nil)
}

// startAppWith is startApp with before, if set, run on the built App before
// it serves (to set what New would, e.g. the task streams' log).
func startAppWith(t testing.TB, mutate func(*Config), before func(*App)) *testApp {
	t.Helper()
	cfg := Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: testLogger(t),
		RequestRate: -1, PublicRate: -1, HandshakeRate: -1, RegisterRate: -1,
		DrainTimeout: 5 * time.Second, StoreFlushInterval: 20 * time.Millisecond,
		// Raw test nodes would otherwise get a benchmark probe after
		// registering; the benchmark tests turn it back on.
		NoNodeBenchmarks: true,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	app, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(app)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testApp{App: app, url: "http://" + app.Addr(), wsURL: "ws://" + app.Addr() + "/ws/node", cancel: cancel, done: make(chan error, 1)}
	go func() { ta.done <- app.Run(ctx) }()
	t.Cleanup(ta.stop)
	return ta
}

func (ta *testApp) stop() {
	ta.cancel()
	<-ta.done
	ta.done <- nil // stop is idempotent
}

// account creates an account and returns its API key.
func (ta *testApp) account(t testing.TB, name, trust string) string {
	t.Helper()
	_, key, err := ta.store.CreateAccount(context.Background(), name, "", trust)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// keyWith creates another key of the account with limits l (its use, task
// types, spending limits) and returns its id and the key.
func (ta *testApp) keyWith(t testing.TB, accountID string, l store.KeyLimits) (id, key string) {
	t.Helper()
	k, key, err := ta.store.CreateKey(context.Background(), accountID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ta.store.SetKeyLimits(context.Background(), k.ID, l); err != nil {
		t.Fatal(err)
	}
	return k.ID, key
}

// do makes an HTTP request; safe to use from any goroutine.
func (ta *testApp) do(method, path, key string, body any) (int, []byte, http.Header, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, ta.url+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, resp.Header, err
}

// call makes an HTTP request and decodes a JSON answer into out (if non-nil).
func (ta *testApp) call(t *testing.T, method, path, key string, body any, out any) (int, http.Header) {
	t.Helper()
	code, raw, h, err := ta.do(method, path, key, body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: HTTP %d, body %q: %v", method, path, code, raw, err)
		}
	}
	return code, h
}

// reply is an HTTP answer from a goroutine.
type reply struct {
	code int
	body []byte
	err  error
}

// requestAsync sends POST /api/v1/request from a goroutine.
func (ta *testApp) requestAsync(key string, body any) <-chan reply {
	return async(func() reply {
		code, b, _, err := ta.do(http.MethodPost, "/api/v1/request", key, body)
		return reply{code, b, err}
	})
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("HTTP %d body %q: %v", r.code, r.body, err)
	}
}

// apiErr is the error body shape.
type apiErr struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Detail string `json:"detail"`
}

type result struct {
	TaskID           string `json:"task_id"`
	Status           string `json:"status"`
	Result           string `json:"result"`
	NodeID           string `json:"node_id"`
	ProcessingTimeMs int64  `json:"processing_time_ms"`
	Usage            *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

// sseStream reads a streaming answer event by event.
type sseStream struct {
	resp *http.Response
	r    *bufio.Reader
}

func (ta *testApp) stream(t *testing.T, ctx context.Context, key string, body map[string]any) (*sseStream, int) {
	t.Helper()
	body["stream"] = true
	j, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ta.url+"/api/v1/request", bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}, resp.StatusCode
}

// next returns the next event's JSON, checking GemmaNet's framing: one
// "data: " line, then a blank line.
func (s *sseStream) next(t *testing.T) map[string]any {
	t.Helper()
	line, err := s.r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading event: %v", err)
	}
	if !strings.HasPrefix(line, "data: ") {
		t.Fatalf("event line %q does not start with \"data: \"", line)
	}
	blank, err := s.r.ReadString('\n')
	if err != nil || blank != "\n" {
		t.Fatalf("event not followed by a blank line: %q, %v", blank, err)
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
		t.Fatalf("event %q: %v", line, err)
	}
	return ev
}

func (s *sseStream) expectEOF(t *testing.T) {
	t.Helper()
	if b, err := s.r.ReadByte(); err == nil {
		rest, _ := s.r.ReadString(0)
		t.Fatalf("more after the last event: %q", string(b)+rest)
	}
}

// wireNode is a node written against the wire spec alone (no SDK).
type wireNode = nodetest.Node

func connectNode(t *testing.T, url string, reg map[string]any) *wireNode {
	t.Helper()
	return nodetest.Connect(t, url, reg)
}

func reg(key, name string, caps ...string) map[string]any { return nodetest.Reg(key, name, caps...) }

// async runs f in a goroutine and returns a channel with its answer.
func async[T any](f func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return ch
}

func waitFor[T any](t *testing.T, ch <-chan T, d time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no answer within %s", d)
	}
	var zero T
	return zero
}

// startPair starts two instances of one cluster on the shared Redis (a
// fresh namespace) and a fresh PostgreSQL schema; mutate, if set, adjusts
// both. It skips the test when Redis is not there.
func startPair(t *testing.T, schema string, mutate func(*Config)) (a, b *testApp) {
	t.Helper()
	return startPairWith(t, schema, mutate, nil)
}

// startPairWith is startPair with before run on each App before it serves.
func startPairWith(t *testing.T, schema string, mutate func(*Config), before func(*App)) (a, b *testApp) {
	t.Helper()
	redistest.Client(t)
	ns, db := redistest.Namespace(t), pgtest.SchemaURL(t, schema)
	multi := func(c *Config) {
		c.RedisURL, c.Namespace, c.DatabaseURL = redistest.URL(), ns, db
		if mutate != nil {
			mutate(c)
		}
	}
	return startAppWith(t, multi, before), startAppWith(t, multi, before)
}

// answerOne sends one request for taskType with key to ta, has n answer it
// with status, and fails the test unless the request gets its 200.
func answerOne(t *testing.T, ta *testApp, n *wireNode, key, taskType, status string) reply {
	t.Helper()
	ch := ta.requestAsync(key, map[string]any{"task_type": taskType, "content": "x"})
	n.Result(n.Expect("task_assign").TaskID(), status, "x")
	r := waitFor(t, ch, 3*time.Second)
	if r.code != 200 {
		t.Fatalf("a request answered %s: %d %s", status, r.code, r.body)
	}
	return r
}
