package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/streamlog"
)

// owners is a TaskAuthorizer over a map the test fills: task id → account
// id; "nostream" tasks have no stream.
type owners struct {
	mu sync.Mutex
	m  map[string]string
}

func (o *owners) set(task, account string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]string{}
	}
	o.m[task] = account
}

func (o *owners) authorize(_ context.Context, task, account, _ string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch owner, ok := o.m[task]; {
	case !ok || owner != account:
		return fmt.Errorf("task %s: %w", task, ErrTaskNotFound)
	case strings.HasPrefix(task, "nostream"):
		return ErrNoStream
	}
	return nil
}

// withTaskStreams swaps the async tasks' authoriser for o's, so that a
// test feeds the mode's log (a.streams) by hand for tasks it names.
func withTaskStreams(o *owners, keepAlive time.Duration) func(*App) {
	return func(a *App) {
		a.authorizeTask = o.authorize
		if keepAlive > 0 {
			a.keepAlive = keepAlive
		}
	}
}

// accountKey creates an account, returning its id and key.
func (ta *testApp) accountKey(t *testing.T, name string) (string, string) {
	t.Helper()
	acct, key, err := ta.store.CreateAccount(context.Background(), name, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return acct.ID, key
}

// sseEvent is one event of a task stream as read off the wire.
type sseEvent struct {
	id, data string
	comment  bool
}

type taskSSE struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// openStream opens GET /api/v1/tasks/{task}/stream with lastID as
// Last-Event-ID (none if empty).
func (ta *testApp) openStream(t *testing.T, key, task, lastID string) *taskSSE {
	t.Helper()
	return ta.openStreamQuery(t, key, task, lastID, "")
}

// openStreamQuery is openStream with a query string (after the "?").
func (ta *testApp) openStreamQuery(t *testing.T, key, task, lastID, query string) *taskSSE {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	u := ta.url + "/api/v1/tasks/" + task + "/stream"
	if query != "" {
		u += "?" + query
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &taskSSE{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.cut)
	return s
}

// cut drops the connection, as a flaky network would.
func (s *taskSSE) cut() { s.cancel(); _ = s.resp.Body.Close() }

// next reads one event (or comment), strictly framed: an optional id line,
// one data line, a blank line.
func (s *taskSSE) next(t *testing.T) sseEvent {
	t.Helper()
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading an event: %v (so far %+v)", err, ev)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return ev
		case strings.HasPrefix(line, ": "):
			ev.comment = true
		case strings.HasPrefix(line, "id: ") && ev.id == "" && ev.data == "":
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: ") && ev.data == "":
			ev.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// chunk reads the next event, skipping keep-alives, and checks it is
// chunk seq with delta "c<seq>".
func (s *taskSSE) chunk(t *testing.T, seq int) {
	t.Helper()
	ev := s.skipComments(t)
	want := fmt.Sprintf(`{"delta":"c%d"}`, seq)
	if ev.id != fmt.Sprint(seq) || ev.data != want {
		t.Fatalf("event %+v, want id %d and %s", ev, seq, want)
	}
}

func (s *taskSSE) skipComments(t *testing.T) sseEvent {
	t.Helper()
	for {
		if ev := s.next(t); !ev.comment {
			return ev
		}
	}
}

// result reads the result event with seq and final, then the end.
func (s *taskSSE) result(t *testing.T, seq int, final string) {
	t.Helper()
	ev := s.skipComments(t)
	var got struct {
		Done   bool            `json:"done"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(ev.data), &got); err != nil || ev.id != fmt.Sprint(seq) || !got.Done || string(got.Result) != final {
		t.Fatalf("event %+v, want id %d and {done:true, result:%s} (%v)", ev, seq, final, err)
	}
	if b, err := s.r.ReadByte(); err == nil {
		rest, _ := s.r.ReadString(0)
		t.Fatalf("more after the result: %q", string(b)+rest)
	}
}

func feed(t *testing.T, l streamlog.Log, task string, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if seq, err := l.Append(context.Background(), task, fmt.Sprint("c", i)); err != nil || seq != int64(i) {
			t.Fatalf("append %d: seq %d, %v", i, seq, err)
		}
	}
}

// resumeScenario is the bar: 10 chunks, 4 read on a, the
// connection cut; chunks go on meanwhile; resumed on b with Last-Event-ID
// 4, exactly 5..10 and the result arrive, partly replayed and partly live.
func resumeScenario(t *testing.T, a, b *testApp, o *owners) {
	acct, key := a.accountKey(t, "reader")
	o.set("t1", acct)
	const final = `{"task_id":"t1","status":"completed","result":"c1c2"}`

	feed(t, a.streams, "t1", 1, 6)
	s := a.openStream(t, key, "t1", "")
	if s.resp.StatusCode != http.StatusOK || s.resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HTTP %d %q, want a 200 event stream", s.resp.StatusCode, s.resp.Header.Get("Content-Type"))
	}
	for i := 1; i <= 4; i++ {
		s.chunk(t, i)
	}
	s.cut()
	feed(t, a.streams, "t1", 7, 8) // while nobody reads

	r := b.openStream(t, key, "t1", "4")
	for i := 5; i <= 8; i++ { // replayed
		r.chunk(t, i)
	}
	feed(t, a.streams, "t1", 9, 9)
	r.chunk(t, 9) // live
	feed(t, a.streams, "t1", 10, 10)
	r.chunk(t, 10)
	if err := a.streams.End(context.Background(), "t1", []byte(final)); err != nil {
		t.Fatal(err)
	}
	r.result(t, 11, final)
}

func TestTaskStreamResumesWithLastEventID(t *testing.T) {
	o := &owners{}
	ta := startAppWith(t, nil, withTaskStreams(o, 0))
	resumeScenario(t, ta, ta, o)
}

// Across instances: read on A, resumed on B, the log in
// the shared Redis.
func TestTaskStreamResumesOnAnotherInstance(t *testing.T) {
	o := &owners{}
	a, b := startPairWith(t, "taskstream", nil, withTaskStreams(o, 0))
	resumeScenario(t, a, b, o)
}

func TestTaskStreamAnswers(t *testing.T) {
	o := &owners{}
	ta := startAppWith(t, nil, withTaskStreams(o, 0))
	acct, key := ta.accountKey(t, "mine")
	_, otherKey := ta.accountKey(t, "other")
	o.set("t1", acct)
	o.set("nostream1", acct)
	feed(t, ta.streams, "t1", 1, 3)
	if err := ta.streams.End(context.Background(), "t1", []byte(`{"status":"completed"}`)); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, key, path, lastID string
		status                  int
		code                    string
	}{
		{"no key", "", "/api/v1/tasks/t1/stream", "", 401, "invalid_api_key"},
		{"another account's task", otherKey, "/api/v1/tasks/t1/stream", "", 404, "task_not_found"},
		{"an unknown task", key, "/api/v1/tasks/nope/stream", "", 404, "task_not_found"},
		{"a task without a stream", key, "/api/v1/tasks/nostream1/stream", "", 404, "stream_not_found"},
		{"a Last-Event-ID that is not a number", key, "/api/v1/tasks/t1/stream", "abc", 400, "invalid_last_event_id"},
		{"a negative Last-Event-ID", key, "/api/v1/tasks/t1/stream", "-1", 400, "invalid_last_event_id"},
		{"at the end: nothing missed", key, "/api/v1/tasks/t1/stream", "4", 204, ""},
		{"past the end", key, "/api/v1/tasks/t1/stream", "99", 204, ""},
		{"the query's id, past the end", key, "/api/v1/tasks/t1/stream?last_event_id=4", "", 204, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, ta.url+tc.path, nil)
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			if tc.lastID != "" {
				req.Header.Set("Last-Event-ID", tc.lastID)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body apiErr
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != tc.status || body.Error.Code != tc.code {
				t.Fatalf("HTTP %d %q, want %d %q", resp.StatusCode, body.Error.Code, tc.status, tc.code)
			}
		})
	}

	t.Run("the query's id when there is no header", func(t *testing.T) {
		s := ta.openStreamQuery(t, key, "t1", "", "last_event_id=2")
		s.chunk(t, 3)
		s.result(t, 4, `{"status":"completed"}`)
	})
	t.Run("the header wins over the query", func(t *testing.T) {
		s := ta.openStreamQuery(t, key, "t1", "3", "last_event_id=0")
		s.result(t, 4, `{"status":"completed"}`)
	})
}

// An idle stream gets keep-alive comments, and a chunk after them still
// comes.
func TestTaskStreamKeepAlive(t *testing.T) {
	o := &owners{}
	ta := startAppWith(t, nil, withTaskStreams(o, 30*time.Millisecond))
	acct, key := ta.accountKey(t, "idle")
	o.set("t1", acct)
	s := ta.openStream(t, key, "t1", "") // the task has written nothing yet
	for range 2 {
		if ev := s.next(t); !ev.comment || ev.id != "" || ev.data != "" {
			t.Fatalf("an idle stream sent %+v, want a keep-alive comment", ev)
		}
	}
	feed(t, ta.streams, "t1", 1, 1)
	s.chunk(t, 1)
}

// Stopping the instance ends a followed stream at once (the client resumes
// elsewhere), rather than holding the drain until its timeout.
func TestTaskStreamEndsOnShutdown(t *testing.T) {
	o := &owners{}
	ta := startAppWith(t, func(c *Config) { c.DrainTimeout = 0 }, withTaskStreams(o, 0))
	acct, key := ta.accountKey(t, "drain")
	o.set("t1", acct)
	feed(t, ta.streams, "t1", 1, 1)
	s := ta.openStream(t, key, "t1", "")
	s.chunk(t, 1)
	stopped := async(func() struct{} { ta.stop(); return struct{}{} })
	waitFor(t, stopped, 5*time.Second)
	if _, err := s.r.ReadString('\n'); err == nil {
		t.Fatal("the stream went on after the instance stopped")
	}
}

// The open-streams gauge counts a follower while it follows, and not after.
func TestTaskStreamGauge(t *testing.T) {
	o := &owners{}
	ta := startAppWith(t, nil, withTaskStreams(o, 0))
	acct, key := ta.accountKey(t, "gauge")
	o.set("t1", acct)
	s := ta.openStream(t, key, "t1", "")
	feed(t, ta.streams, "t1", 1, 1)
	s.chunk(t, 1) // the handler is running
	if n := ta.streamsOpen.Load(); n != 1 {
		t.Fatalf("streams_open = %d while one follows, want 1", n)
	}
	s.cut()
	deadline := time.Now().Add(5 * time.Second)
	for ta.streamsOpen.Load() != 0 { // the handler notices the cut on its own time
		if time.Now().After(deadline) {
			t.Fatal("streams_open stayed up after the client went away")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The stream's headers go at once, before any chunk exists: a client is
// not left waiting for a task that has not started.
func TestTaskStreamHeadersAtOnce(t *testing.T) {
	o := &owners{}
	ta := startAppWith(t, nil, withTaskStreams(o, time.Hour)) // no keep-alive to flush them either
	acct, key := ta.accountKey(t, "early")
	o.set("t1", acct)
	opened := async(func() int { return ta.openStream(t, key, "t1", "").resp.StatusCode })
	if code := waitFor(t, opened, 2*time.Second); code != http.StatusOK {
		t.Fatalf("HTTP %d, want 200", code)
	}
}
