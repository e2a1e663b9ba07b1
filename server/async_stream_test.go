package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/redistest"
)

// The resume bar, end to end: an async task submitted with stream:
// true on A, its node on A sending 10 chunks; 4 read on A, the connection
// cut, chunks going on meanwhile; resumed on B with Last-Event-ID 4:
// exactly 5..10 arrive, then the result event with the task's final view,
// none missing or repeated. Another account, a task without a stream and
// a synchronous task's id are 404s.
func TestAsyncStreamResumesOnAnotherInstance(t *testing.T) {
	redistest.Client(t)
	a, b := startPair(t, "asyncstream", nil)
	_, key := a.accountKey(t, "reader")
	_, other := a.accountKey(t, "other")
	n := connectNode(t, a.wsURL, reg(key, "n1", "gen"))
	id := a.submit(t, key, map[string]any{"task_type": "gen", "content": "ten", "stream": true})
	m := n.Expect("task_assign")
	if m.TaskID() != id {
		t.Fatalf("the node got %s, want %s", m.TaskID(), id)
	}
	chunks := func(from, to int) {
		for i := from; i <= to; i++ {
			n.Chunk(id, fmt.Sprint("c", i))
		}
	}
	chunks(1, 6)
	s := a.openStream(t, key, id, "")
	if s.resp.StatusCode != http.StatusOK {
		t.Fatalf("stream on A: HTTP %d", s.resp.StatusCode)
	}
	for i := 1; i <= 4; i++ {
		s.chunk(t, i)
	}
	s.cut() // the task goes on: a reader going away cancels nothing
	chunks(7, 8)

	r := b.openStream(t, key, id, "4")
	for i := 5; i <= 8; i++ { // replayed from the shared log
		r.chunk(t, i)
	}
	chunks(9, 10)
	r.chunk(t, 9) // live
	r.chunk(t, 10)
	n.Result(id, "completed", "c1c2c3c4c5c6c7c8c9c10")
	ev := r.skipComments(t)
	var end struct {
		Done   bool      `json:"done"`
		Result asyncView `json:"result"`
	}
	if err := json.Unmarshal([]byte(ev.data), &end); err != nil || ev.id != "11" || !end.Done || end.Result.TaskID != id ||
		end.Result.Status != "completed" || end.Result.Result == nil || *end.Result.Result != "c1c2c3c4c5c6c7c8c9c10" {
		t.Fatalf("the last event %+v (%v), want id 11, done, the task's completed view", ev, err)
	}
	if _, v := b.view(t, key, id, ""); v.Status != "completed" || v.Attempts != 1 {
		t.Fatalf("view on B: %+v", v)
	}

	for _, c := range []struct {
		name, key, id, code string
	}{
		{"another account's", other, id, "task_not_found"},
		{"an unknown task", key, "no-such-task", "task_not_found"},
		{"a task without a stream", key, a.submit(t, key, map[string]any{"task_type": "gen", "content": "plain"}), "stream_not_found"},
	} {
		var e apiErr
		if code, _ := b.call(t, http.MethodGet, "/api/v1/tasks/"+c.id+"/stream", c.key, nil, &e); code != 404 || e.Error.Code != c.code {
			t.Errorf("%s: %d %+v, want 404 %s", c.name, code, e, c.code)
		}
	}
}
