package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/sdk"
)

// taskStreamServer serves one task's stream of n chunks and its result,
// honouring Last-Event-ID, as switchyard does. cuts[i] says where the i-th
// connection is dropped: after that many whole events, with part of the
// next one written ("half") or not. It records each connection's
// Last-Event-ID.
type taskStreamServer struct {
	n    int
	cuts []cut

	mu      sync.Mutex
	lastIDs []string
}

type cut struct {
	after int
	half  bool
}

const finalJSON = `{"task_id":"t1","status":"completed","result":"all","node_id":"n1","processing_time_ms":7,"usage":null,"stream":true}`

func (s *taskStreamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/tasks/t1/stream" || r.Header.Get("Authorization") != "Bearer gn_key" {
		http.Error(w, `{"error":{"code":"task_not_found","message":"no such task"}}`, http.StatusNotFound)
		return
	}
	s.mu.Lock()
	conn := len(s.lastIDs)
	s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
	s.mu.Unlock()
	from := 1
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, _ := strconv.Atoi(id)
		from = n + 1
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	sent := 0
	for seq := from; seq <= s.n+1; seq++ {
		ev := fmt.Sprintf("id: %d\ndata: {\"delta\":\"c%d\"}\n\n", seq, seq)
		if seq == s.n+1 {
			ev = fmt.Sprintf("id: %d\ndata: {\"done\":true,\"result\":%s}\n\n", seq, finalJSON)
		}
		if conn < len(s.cuts) && sent == s.cuts[conn].after {
			if s.cuts[conn].half {
				_, _ = w.Write([]byte(ev[:len(ev)/2+3]))
				fl.Flush()
			}
			panic(http.ErrAbortHandler) // drops the connection, as a flaky network would
		}
		_, _ = w.Write([]byte(": keep-alive\n\n" + ev))
		fl.Flush()
		sent++
	}
}

func (s *taskStreamServer) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lastIDs...)
}

func streamAll(t *testing.T, c *sdk.Client) ([]string, *sdk.TaskOutcome, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var chunks []string
	out, err := c.StreamTask(ctx, "t1", func(ch string) error { chunks = append(chunks, ch); return nil })
	return chunks, out, err
}

func chunksUpTo(n int) string {
	var s []string
	for i := 1; i <= n; i++ {
		s = append(s, fmt.Sprint("c", i))
	}
	return strings.Join(s, ",")
}

// A stream cut after 4 events, then mid-event (the 7th half written), is
// resumed each time from the last whole event: every chunk once, in order,
// then the result.
func TestStreamTaskResumesAcrossCuts(t *testing.T) {
	s := &taskStreamServer{n: 10, cuts: []cut{{after: 4}, {after: 2, half: true}}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	chunks, out, err := streamAll(t, sdk.NewClient(srv.URL, "gn_key"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(chunks, ","); got != chunksUpTo(10) {
		t.Fatalf("chunks %s, want %s", got, chunksUpTo(10))
	}
	if out.TaskID != "t1" || out.Status != "completed" || out.Result == nil || *out.Result != "all" || out.ProcessingTimeMs != 7 || string(out.Raw) != finalJSON {
		t.Fatalf("outcome %+v (raw %s)", out, out.Raw)
	}
	if ids := s.ids(); strings.Join(ids, "|") != "|4|6" {
		t.Fatalf("Last-Event-IDs %q, want none, then 4, then 6 (the half-sent 7th not taken)", ids)
	}
}

func TestStreamTaskStops(t *testing.T) {
	s := &taskStreamServer{n: 3}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	t.Run("an answer that is not worth retrying", func(t *testing.T) {
		_, _, err := streamAll(t, sdk.NewClient(srv.URL, "gn_other"))
		var ae *sdk.APIError
		if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "task_not_found" {
			t.Fatalf("err = %v, want the 404 task_not_found", err)
		}
	})
	t.Run("the callback's error", func(t *testing.T) {
		stop := errors.New("enough")
		_, err := sdk.NewClient(srv.URL, "gn_key").StreamTask(context.Background(), "t1", func(string) error { return stop })
		if err != stop {
			t.Fatalf("err = %v, want the callback's own error", err)
		}
	})
	t.Run("the context", func(t *testing.T) {
		down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":{"code":"not_ready","message":"draining"}}`, http.StatusServiceUnavailable)
		}))
		t.Cleanup(down.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := sdk.NewClient(down.URL, "gn_key").StreamTask(ctx, "t1", nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's (a 503 is retried until it ends)", err)
		}
	})
}

// A 503 (an instance draining) and a stream_unavailable error event are
// retried.
func TestStreamTaskRetries(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	inner := &taskStreamServer{n: 2}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch n {
		case 1:
			http.Error(w, `{"error":{"code":"not_ready","message":"draining"}}`, http.StatusServiceUnavailable)
		case 2:
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("id: 1\ndata: {\"delta\":\"c1\"}\n\ndata: {\"error\":{\"code\":\"stream_unavailable\",\"message\":\"redis\"},\"task_id\":\"t1\"}\n\n"))
		default:
			inner.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	chunks, out, err := streamAll(t, sdk.NewClient(srv.URL, "gn_key"))
	if err != nil || out.Status != "completed" {
		t.Fatalf("%+v, %v", out, err)
	}
	if got := strings.Join(chunks, ","); got != "c1,c2" {
		t.Fatalf("chunks %s, want c1,c2", got)
	}
	if ids := inner.ids(); len(ids) != 1 || ids[0] != "1" {
		t.Fatalf("the third connection's Last-Event-ID %q, want 1", ids)
	}
}
