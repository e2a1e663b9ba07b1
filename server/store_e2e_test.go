package server

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

// When the store cannot answer, the instance says so: health is not ready,
// a node whose key is not cached is closed with 1013 and no error message
// (so GemmaNet's SDK retries rather than stops), and a request with an
// uncached key is a 503 store_unavailable with Retry-After. The instance
// still shuts down cleanly.
func TestStoreUnavailable(t *testing.T) {
	ta := startApp(t, nil)
	// A real key, created in the store but never used, so not in the auth cache.
	key := ta.account(t, "alice", "")
	var health struct {
		Status string            `json:"status"`
		Reason string            `json:"reason"`
		Checks map[string]string `json:"checks"`
	}
	if code, _ := ta.call(t, "GET", "/api/health", "", nil, &health); code != 200 || health.Status != "ok" {
		t.Fatalf("health before the outage: %d %+v", code, health)
	}

	if err := ta.store.Close(); err != nil {
		t.Fatal(err)
	}

	// (a) Readiness.
	code, _ := ta.call(t, "GET", "/api/health", "", nil, &health)
	if code != http.StatusServiceUnavailable || health.Status != "not_ready" || health.Reason != "the store is unavailable" ||
		health.Checks["store"] != "unavailable" {
		t.Fatalf("health with the store closed: %d %+v", code, health)
	}

	// (b) A node whose key cannot be checked: the first frame it gets is
	// the close, 1013.
	conn, _, err := nodetest.Dial(t, ta.wsURL)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	register := `{"msg_type":"node_register","payload":{"api_key":"` + key + `","name":"w","capabilities":["echo"]}}`
	if err := conn.Write(wctx, websocket.MessageText, []byte(register)); err != nil {
		t.Fatal(err)
	}
	typ, data, err := conn.Read(wctx)
	if err == nil {
		t.Fatalf("first frame is a message (type %v) %s, want the close 1013", typ, data)
	}
	if code := websocket.CloseStatus(err); code != websocket.StatusTryAgainLater {
		t.Fatalf("node closed with %d (%v), want 1013", code, err)
	}

	// The SDK node reads that bare close as "retry later", not as a refusal.
	logs := newLogCapture()
	n := runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "w", Capabilities: []string{"echo"}, Handler: handlers.Echo(), Logger: slog.New(logs)})
	for seen := 0; seen < 3; {
		select {
		case r := <-logs.ch:
			if r.Message == "connection failed; retrying" {
				if err := attr(r, "err"); !strings.Contains(err, "TryAgainLater") {
					t.Fatalf("SDK node's attempt failed with %q, want close 1013", err)
				}
				seen++
			}
		case <-n.Stopped():
			t.Fatalf("SDK node gave up during the outage: %v", n.Err())
		case <-time.After(5 * time.Second):
			t.Fatalf("SDK node: %d retries within 5s", seen)
		}
	}
	if err := n.Stop(t); err != nil {
		t.Fatal(err)
	}

	// (c) The API with keys it has never seen, the real one and a made-up one.
	for _, k := range []string{key, "gn_" + randomHex(16)} {
		var e apiErr
		code, h := ta.call(t, "POST", "/api/v1/request", k, map[string]any{"task_type": "echo", "content": "x"}, &e)
		if code != http.StatusServiceUnavailable || e.Error.Code != "store_unavailable" || h.Get("Retry-After") == "" {
			t.Fatalf("request with the store closed: %d %+v, Retry-After %q", code, e, h.Get("Retry-After"))
		}
	}

	// The drain closes the store a second time; it must neither panic nor hang.
	stopped := async(func() error {
		ta.cancel()
		err := <-ta.done
		ta.done <- nil // for the cleanup's stop
		return err
	})
	if err := waitFor(t, stopped, 20*time.Second); err != nil {
		t.Fatalf("Run with the store closed: %v", err)
	}
}

// The whole flow on PostgreSQL, then a fresh instance on the same database
// finds the task's record, the rating and the node's reputation.
func TestPostgresEndToEnd(t *testing.T) {
	dbURL := pgtest.SchemaURL(t, "srvtest")
	usePG := func(c *Config) { c.DatabaseURL = dbURL }
	ta := startApp(t, usePG)
	key := ta.account(t, "alice", "")
	node := runSDKNode(t, ta, sdk.NodeConfig{APIKey: key, Name: "pg-worker", Capabilities: []string{"echo"}, Handler: handlers.Echo()})
	nodeID := node.WaitRegistered(t, 5*time.Second)
	c := e2eClient(t, ta, key)
	ctx := e2eCtx(t)

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Store string `json:"store"`
	}
	ta.call(t, "GET", "/api/v1/status", "", nil, &status)
	if st.OnlineNodes != 1 || status.Store != "postgres" {
		t.Fatalf("status: %+v, store %q", st, status.Store)
	}

	res, err := c.Request(ctx, sdk.Request{TaskType: "echo", Content: "persist me"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "completed" || res.Result != "persist me" || res.NodeID != nodeID {
		t.Fatalf("Request: %+v", res)
	}
	if rr, err := c.Rate(ctx, res.TaskID, 4); err != nil || rr.Status != "rated" || !slices.Equal(rr.NodeIDs, []string{nodeID}) {
		t.Fatalf("Rate: %+v, %v", rr, err)
	}
	info, err := c.Task(ctx, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != "completed" || !slices.Equal(info.NodeIDs, []string{nodeID}) || info.FinishedAt == nil {
		t.Fatalf("Task: %+v", info)
	}
	type entry struct {
		NodeID       string  `json:"node_id"`
		Name         string  `json:"name"`
		TotalTasks   int64   `json:"total_tasks"`
		SuccessRate  float64 `json:"success_rate"`
		AvgRating    float64 `json:"avg_rating"`
		TotalRatings int64   `json:"total_ratings"`
	}
	want := entry{NodeID: nodeID, Name: "pg-worker", TotalTasks: 1, SuccessRate: 1, AvgRating: 4, TotalRatings: 1}
	leaderboardHas := func(t *testing.T, ta *testApp) {
		t.Helper()
		var board []entry
		if code, _ := ta.call(t, "GET", "/api/v1/leaderboard", "", nil, &board); code != 200 {
			t.Fatalf("leaderboard: HTTP %d", code)
		}
		if len(board) != 1 || board[0] != want {
			t.Fatalf("leaderboard %+v, want [%+v]", board, want)
		}
	}
	leaderboardHas(t, ta)

	// PostgreSQL keeps microseconds; the record may have been read from the
	// instance's write buffer, with nanoseconds.
	// Stop everything, so that what follows can only come from the database.
	if err := node.Stop(t); err != nil {
		t.Fatal(err)
	}
	ta.stop()

	ta2 := startApp(t, usePG)
	c2 := e2eClient(t, ta2, key) // the key itself must have survived
	info2, err := c2.Task(ctx, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if info2.Status != "completed" || !slices.Equal(info2.NodeIDs, []string{nodeID}) || info2.FinishedAt == nil ||
		info2.FinishedAt.Sub(*info.FinishedAt).Abs() >= time.Microsecond || info2.ProcessingTimeMs != info.ProcessingTimeMs {
		t.Fatalf("task record after the restart: %+v, before %+v", info2, info)
	}
	var rep entry
	if code, _ := ta2.call(t, "GET", "/api/v1/reputation/"+nodeID, "", nil, &rep); code != 200 {
		t.Fatalf("reputation: HTTP %d", code)
	}
	if rep.TotalTasks != 1 || rep.TotalRatings != 1 || rep.AvgRating != 4 || rep.SuccessRate != 1 {
		t.Fatalf("reputation after the restart: %+v", rep)
	}
	leaderboardHas(t, ta2)
	_, err = c2.Rate(ctx, res.TaskID, 5)
	asAPIError(t, err, http.StatusConflict, "already_rated")
}
