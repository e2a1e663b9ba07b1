package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-dev/switchyard/idempotency"
	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// keyed sends POST path with an Idempotency-Key (none when idemKey is "").
func (ta *testApp) keyed(path, apiKey, idemKey, body string) reply2 {
	req, err := http.NewRequest(http.MethodPost, ta.url+path, strings.NewReader(body))
	if err != nil {
		return reply2{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	if idemKey != "" {
		req.Header.Set(HeaderIdempotencyKey, idemKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply2{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply2{code: resp.StatusCode, body: b, header: resp.Header, err: err}
}

// reply2 is an answer with its headers.
type reply2 struct {
	code   int
	body   []byte
	header http.Header
	err    error
}

func (r reply2) replayed() bool { return r.header.Get(HeaderIdempotentReplayed) == "true" }

// waitGauge waits until the instances' waiting requests add up to n.
func waitGauge(t *testing.T, n float64, apps ...*testApp) {
	t.Helper()
	waitUntilFor(t, 10*time.Second, func() bool {
		var sum float64
		for _, ta := range apps {
			sum += testutil.ToFloat64(ta.idemWaiting)
		}
		return sum == n
	})
}

func outcomes(apps ...*testApp) map[string]float64 {
	m := map[string]float64{}
	for _, ta := range apps {
		for _, o := range []string{"new", "replayed", "waited", "mismatch", "released", "full", "invalid", "error"} {
			m[o] += testutil.ToFloat64(ta.idemTotal.WithLabelValues(o))
		}
	}
	return m
}

// The bar: the same Idempotency-Key sent to two instances at once (real
// Redis and PostgreSQL): one node run, two identical answers. The second
// waits for the first while its task runs; a third, later, is replayed.
func TestIdempotencyKeyAcrossInstances(t *testing.T) {
	a, b := startPair(t, "idem", nil)
	key := a.account(t, "alice", "")
	n := connectNode(t, a.wsURL, reg(key, "n1", "echo"))
	body := `{"task_type":"echo","content":"once"}`

	ra := async(func() reply2 { return a.keyed("/api/v1/request", key, "order-17", body) })
	rb := async(func() reply2 { return b.keyed("/api/v1/request", key, "order-17", body) })
	m := n.Expect("task_assign")
	waitGauge(t, 1, a, b) // the other request waits for this task's answer
	n.Result(m.TaskID(), "completed", "done once")
	ansA, ansB := waitFor(t, ra, 10*time.Second), waitFor(t, rb, 10*time.Second)
	for _, r := range []reply2{ansA, ansB} {
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("answer %d %s %v", r.code, r.body, r.err)
		}
	}
	if !bytes.Equal(ansA.body, ansB.body) || !strings.Contains(string(ansA.body), m.TaskID()) {
		t.Fatalf("two answers differ:\n%s\n%s", ansA.body, ansB.body)
	}
	if ansA.replayed() == ansB.replayed() {
		t.Fatalf("Idempotent-Replayed on A %q, on B %q: want it on exactly one", ansA.header.Get(HeaderIdempotentReplayed), ansB.header.Get(HeaderIdempotentReplayed))
	}
	if ct := ansA.header.Get("Content-Type"); ct != ansB.header.Get("Content-Type") {
		t.Fatalf("content types %q and %q", ct, ansB.header.Get("Content-Type"))
	}
	// Later, on either instance: replayed at once.
	for _, ta := range []*testApp{a, b} {
		r := ta.keyed("/api/v1/request", key, "order-17", body)
		if r.code != http.StatusOK || !bytes.Equal(r.body, ansA.body) || !r.replayed() {
			t.Fatalf("a later repeat: %d %s replayed=%v", r.code, r.body, r.replayed())
		}
	}
	// The node ran the task once: its next task is another request's.
	other := async(func() reply2 { return b.keyed("/api/v1/request", key, "", body) })
	if m2 := n.Expect("task_assign"); m2.TaskID() == m.TaskID() {
		t.Fatal("the node was sent the keyed task twice")
	} else {
		n.Result(m2.TaskID(), "completed", "x")
	}
	if r := waitFor(t, other, 10*time.Second); r.code != http.StatusOK {
		t.Fatalf("a request without a key: %d %s", r.code, r.body)
	}
	got := outcomes(a, b)
	if got["new"] != 1 || got["waited"] != 1 || got["replayed"] != 2 {
		t.Fatalf("outcomes %v, want new 1, waited 1, replayed 2", got)
	}
}

// A key's rules on one instance: another body is 422, another account's
// same key is its own, a bad key is 400, no key runs every time, and a
// request refused before its task ran frees its key.
func TestIdempotencyKeyRules(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	other := ta.account(t, "bob", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "echo"))
	run := func(nd *wireNode, apiKey, idemKey, body string) reply2 {
		t.Helper()
		ch := async(func() reply2 { return ta.keyed("/api/v1/request", apiKey, idemKey, body) })
		nd.Result(nd.Expect("task_assign").TaskID(), "completed", "ok")
		return waitFor(t, ch, 10*time.Second)
	}
	first := run(n, key, "k1", `{"task_type":"echo","content":"a"}`)
	if first.code != http.StatusOK || first.replayed() {
		t.Fatalf("first: %d %s", first.code, first.body)
	}
	var e apiErr
	r := ta.keyed("/api/v1/request", key, "k1", `{"task_type":"echo","content":"b"}`)
	if r.decodeErr(t, &e); r.code != http.StatusUnprocessableEntity || e.Error.Code != string(CodeIdempotencyKeyReused) {
		t.Fatalf("same key, another body: %d %s", r.code, r.body)
	}
	// The same body on another route is another request.
	if r := ta.keyed("/api/v1/tasks", key, "k1", `{"task_type":"echo","content":"a"}`); r.code != http.StatusUnprocessableEntity {
		t.Fatalf("same key and body on another route: %d %s", r.code, r.body)
	}
	// Another account's k1 is unrelated: it runs.
	if r := run(n, other, "k1", `{"task_type":"echo","content":"a"}`); r.code != http.StatusOK || r.replayed() || bytes.Equal(r.body, first.body) {
		t.Fatalf("another account's same key: %d %s replayed=%v", r.code, r.body, r.replayed())
	}
	for _, bad := range []string{strings.Repeat("k", 256), "caf\xc3\xa9", `"a"b"`, `""`} {
		r := ta.keyed("/api/v1/request", key, bad, `{"task_type":"echo","content":"a"}`)
		if r.decodeErr(t, &e); r.code != http.StatusBadRequest || e.Error.Code != string(CodeInvalidIdempotencyKey) {
			t.Fatalf("key %q: %d %s", bad, r.code, r.body)
		}
	}
	if r := ta.keyed("/api/v1/request", key, strings.Repeat("k", 255), `{"task_type":"nothing-serves-this","content":"a"}`); r.code != http.StatusNotFound {
		t.Fatalf("a 255-character key, no node: %d %s", r.code, r.body)
	}
	// Refused (no node for the type): the key is free, and a later repeat runs.
	if r := ta.keyed("/api/v1/request", key, "k2", `{"task_type":"later","content":"a"}`); r.code != http.StatusNotFound {
		t.Fatalf("no node: %d %s", r.code, r.body)
	}
	n3 := connectNode(t, ta.wsURL, reg(key, "n3", "later"))
	if r := run(n3, key, "k2", `{"task_type":"later","content":"a"}`); r.code != http.StatusOK || r.replayed() {
		t.Fatalf("the repeat of a refused request: %d %s replayed=%v", r.code, r.body, r.replayed())
	}
	// The quoted form names the same key as the bare one.
	if r := ta.keyed("/api/v1/request", key, `"k2"`, `{"task_type":"later","content":"a"}`); r.code != http.StatusOK || !r.replayed() {
		t.Fatalf("the quoted key: %d %s replayed=%v", r.code, r.body, r.replayed())
	}
	// Without a key, as before: every request runs.
	for range 2 {
		if r := run(n, key, "", `{"task_type":"echo","content":"a"}`); r.code != http.StatusOK || r.replayed() {
			t.Fatalf("without a key: %d %s", r.code, r.body)
		}
	}
	// Twice in one request is refused.
	req, _ := http.NewRequest(http.MethodPost, ta.url+"/api/v1/request", strings.NewReader(`{"task_type":"echo","content":"a"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Add(HeaderIdempotencyKey, "x")
	req.Header.Add(HeaderIdempotencyKey, "y")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("two keys: %d", resp.StatusCode)
	}
}

func (r reply2) decodeErr(t *testing.T, e *apiErr) {
	t.Helper()
	*e = apiErr{}
	reply{r.code, r.body, r.err}.decode(t, e)
}

// An account holds at most --idempotency-max-keys keys.
func TestIdempotencyMaxKeys(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.IdempotencyMaxKeys = 2 })
	key := ta.account(t, "alice", "")
	other := ta.account(t, "bob", "")
	for i, k := range []string{"t1", "t2"} {
		if r := ta.keyed("/api/v1/tasks", key, k, `{"task_type":"echo","content":"a"}`); r.code != http.StatusAccepted {
			t.Fatalf("key %d: %d %s", i, r.code, r.body)
		}
	}
	var e apiErr
	r := ta.keyed("/api/v1/tasks", key, "t3", `{"task_type":"echo","content":"a"}`)
	if r.decodeErr(t, &e); r.code != http.StatusTooManyRequests || e.Error.Code != string(CodeIdempotencyKeysExhausted) {
		t.Fatalf("a third key: %d %s", r.code, r.body)
	}
	if r := ta.keyed("/api/v1/tasks", key, "t1", `{"task_type":"echo","content":"a"}`); r.code != http.StatusAccepted || !r.replayed() {
		t.Fatalf("a repeat of a kept key: %d %s", r.code, r.body)
	}
	if r := ta.keyed("/api/v1/tasks", other, "t3", `{"task_type":"echo","content":"a"}`); r.code != http.StatusAccepted {
		t.Fatalf("another account: %d %s", r.code, r.body)
	}
}

// POST /api/v1/tasks with a key queues one task: its repeat answers the
// same 202, Location included.
func TestIdempotencyKeyAsyncQueuesOnce(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	body := `{"task_type":"echo","content":"a"}`
	first := ta.keyed("/api/v1/tasks", key, "job-1", body)
	again := ta.keyed("/api/v1/tasks", key, "job-1", body)
	if first.code != http.StatusAccepted || again.code != http.StatusAccepted || !bytes.Equal(first.body, again.body) || !again.replayed() {
		t.Fatalf("first %d %s, again %d %s replayed=%v", first.code, first.body, again.code, again.body, again.replayed())
	}
	if first.header.Get("Location") == "" || again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("Location %q, then %q", first.header.Get("Location"), again.header.Get("Location"))
	}
}

// A stream with a key: a repeat once it ended replays its bytes, the same
// event stream; a repeat while it runs waits for its end, then replays it.
func TestIdempotencyKeyStreams(t *testing.T) {
	ta := startApp(t, nil)
	key := ta.account(t, "alice", "")
	n := connectNode(t, ta.wsURL, reg(key, "n1", "chat"))
	for _, route := range []struct{ path, body string }{
		{"/api/v1/request", `{"task_type":"chat","content":"hi","stream":true}`},
		{"/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}],"stream":true}`},
	} {
		first := async(func() reply2 { return ta.keyed(route.path, key, "s-"+route.path, route.body) })
		id := n.Expect("task_assign").TaskID()
		n.Chunk(id, "hel")
		waiting := async(func() reply2 { return ta.keyed(route.path, key, "s-"+route.path, route.body) })
		waitGauge(t, 1, ta)
		n.Chunk(id, "lo")
		n.Result(id, "completed", "hello")
		r1, r2 := waitFor(t, first, 10*time.Second), waitFor(t, waiting, 10*time.Second)
		r3 := ta.keyed(route.path, key, "s-"+route.path, route.body)
		if r1.code != 200 || !strings.HasPrefix(r1.header.Get("Content-Type"), "text/event-stream") || !strings.Contains(string(r1.body), "lo") {
			t.Fatalf("%s: the stream %d %q %s", route.path, r1.code, r1.header.Get("Content-Type"), r1.body)
		}
		for _, r := range []reply2{r2, r3} {
			if r.code != 200 || !bytes.Equal(r.body, r1.body) || !r.replayed() || r.header.Get("Content-Type") != r1.header.Get("Content-Type") {
				t.Fatalf("%s: a repeat %d %q replayed=%v:\n%s\nwant\n%s", route.path, r.code, r.header.Get("Content-Type"), r.replayed(), r.body, r1.body)
			}
		}
	}
}

// The first request's instance dies while a repeat waits: the lease it no
// longer renews lapses, the waiter is answered 503
// idempotency_key_released, and the next repeat runs the task. The dead
// holder is a claim made straight in Redis, with the fingerprint of the
// request, that nobody renews.
func TestIdempotencyHolderDies(t *testing.T) {
	a, b := startPair(t, "idemdeath", nil)
	acct, key, err := a.store.CreateAccount(context.Background(), "alice", "", "")
	if err != nil {
		t.Fatal(err)
	}
	n := connectNode(t, a.wsURL, reg(key, "n1", "echo"))
	body := `{"task_type":"echo","content":"once"}`

	e := echo.New()
	c := e.NewContext(httptest.NewRequest(http.MethodPost, "/api/v1/request", nil), httptest.NewRecorder())
	c.SetPath("/api/v1/request")
	dead := idempotency.NewRedis(redistest.Client(t), idempotency.Prefix(a.cfg.Namespace), idempotency.Config{Lease: 500 * time.Millisecond})
	st, err := dead.Begin(context.Background(), acct.ID, "\x00k-dead", fingerprint(c, []byte(body)))
	if err != nil || st.Kind != idempotency.Claimed {
		t.Fatalf("the dead holder's claim: %v %v", st.Kind, err)
	}

	r := b.keyed("/api/v1/request", key, "k-dead", body)
	var ae apiErr
	if r.decodeErr(t, &ae); r.code != http.StatusServiceUnavailable || ae.Error.Code != string(CodeIdempotencyKeyReleased) || r.header.Get("Retry-After") == "" {
		t.Fatalf("the waiter of a dead holder: %d %s", r.code, r.body)
	}
	ch := async(func() reply2 { return a.keyed("/api/v1/request", key, "k-dead", body) })
	n.Result(n.Expect("task_assign").TaskID(), "completed", "ran")
	if r := waitFor(t, ch, 10*time.Second); r.code != http.StatusOK || r.replayed() {
		t.Fatalf("the next repeat: %d %s", r.code, r.body)
	}
	if got := outcomes(a, b); got["released"] != 1 || got["new"] != 1 {
		t.Fatalf("outcomes %v", got)
	}
}
