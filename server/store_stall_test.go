package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/sdk"
	"github.com/switchyard-dev/switchyard/sdk/handlers"
)

// timed makes a request and returns its status, error code and duration.
func (ta *testApp) timed(t *testing.T, method, path, key string, body any) (int, string, time.Duration) {
	t.Helper()
	var e apiErr
	start := time.Now()
	code, raw, _, err := ta.do(method, path, key, body)
	d := time.Since(start)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if code >= 400 {
		_ = json.Unmarshal(raw, &e)
		for _, leak := range []string{"127.0.0.1", "postgres", "dial ", "password"} {
			if strings.Contains(string(raw), leak) {
				t.Errorf("%s %s: HTTP %d answer %s leaks %q", method, path, code, raw, leak)
			}
		}
	}
	return code, e.Error.Code, d
}

// A PostgreSQL stopped by SIGSTOP (nothing refuses, nothing answers) is not
// a hang (invariant 14): a key never seen gets 503 within the
// store's deadline, then at once once the breaker is open; the leaderboard,
// task lookups and reputation answer 503 fast; a cached key keeps serving
// requests; after SIGCONT the same never-seen key works, and the records of
// the tasks served during the stall are in the database: 0 lost.
func TestStoreStalledPostgres(t *testing.T) {
	pg := pgtest.StartServer(t)
	ta := startApp(t, func(c *Config) { c.DatabaseURL = pg.URL })
	used := ta.account(t, "used", "")
	fresh := ta.account(t, "fresh", "")
	node := runSDKNode(t, ta, sdk.NodeConfig{APIKey: used, Name: "stall-worker", Capabilities: []string{"echo"}, Handler: handlers.Echo()})
	nodeID := node.WaitRegistered(t, 5*time.Second)
	var res result
	if code, _ := ta.call(t, "POST", "/api/v1/request", used, map[string]any{"task_type": "echo", "content": "before"}, &res); code != 200 {
		t.Fatalf("request before the stall: HTTP %d", code)
	}

	pg.Stop()
	stalled := true
	defer func() {
		if stalled {
			pg.Cont()
		}
	}()

	// A never-seen key: 503 within 3 s.
	code, ecode, d := ta.timed(t, "GET", "/api/v1/account", fresh, nil)
	if code != http.StatusServiceUnavailable || ecode != "store_unavailable" || d > 3*time.Second {
		t.Fatalf("never-seen key during the stall: HTTP %d %q in %v, want 503 store_unavailable in < 3s", code, ecode, d)
	}
	// A node registering with the never-seen key is answered, not left
	// waiting: closed with 1013 (try again later) within 3 s.
	start := time.Now()
	nn := nodetest.Start(t, ta.wsURL, reg(fresh, "stall-newcomer", "echo"))
	if c := nn.WaitClosed(3 * time.Second); c != websocket.StatusTryAgainLater {
		t.Fatalf("a node registering during the stall was closed with %d after %v, want 1013 within 3s", c, time.Since(start))
	}
	// The leaderboard (never read yet, so not cached): within 3 s.
	code, ecode, d = ta.timed(t, "GET", "/api/v1/leaderboard", "", nil)
	if code != http.StatusServiceUnavailable || ecode != "store_unavailable" || d > 3*time.Second {
		t.Fatalf("leaderboard during the stall: HTTP %d %q in %v, want 503 in < 3s", code, ecode, d)
	}
	// A finished task not in the write buffer, and a node not known here.
	code, ecode, d = ta.timed(t, "GET", "/api/v1/tasks/no-such-task", used, nil)
	if code != http.StatusServiceUnavailable || ecode != "store_unavailable" || d > 3*time.Second {
		t.Fatalf("task lookup during the stall: HTTP %d %q in %v", code, ecode, d)
	}
	// By now the breaker is open: answers come at once.
	for _, path := range []string{"/api/v1/reputation/unknown-node", "/api/v1/leaderboard"} {
		code, ecode, d = ta.timed(t, "GET", path, "", nil)
		if code != http.StatusServiceUnavailable || ecode != "store_unavailable" || d > 500*time.Millisecond {
			t.Fatalf("%s with the breaker open: HTTP %d %q in %v, want 503 in < 0.5s", path, code, ecode, d)
		}
	}
	code, _, d = ta.timed(t, "GET", "/api/v1/account", fresh, nil)
	if code != http.StatusServiceUnavailable || d > 500*time.Millisecond {
		t.Fatalf("never-seen key with the breaker open: HTTP %d in %v, want 503 in < 0.5s", code, d)
	}
	var health struct {
		Status string            `json:"status"`
		Reason string            `json:"reason"`
		Checks map[string]string `json:"checks"`
	}
	if code, _ := ta.call(t, "GET", "/api/health", "", nil, &health); code != 503 || health.Reason != "the store is unavailable" || health.Checks["store"] != "unavailable" {
		t.Fatalf("health during the stall: %d %+v", code, health)
	}

	// The cached key keeps working, and its tasks are served.
	var during []string
	for i := range 5 {
		var r result
		start := time.Now()
		code, _ := ta.call(t, "POST", "/api/v1/request", used, map[string]any{"task_type": "echo", "content": "during"}, &r)
		if code != 200 || r.Status != "completed" || time.Since(start) > time.Second {
			t.Fatalf("request %d with a cached key during the stall: HTTP %d %+v in %v", i, code, r, time.Since(start))
		}
		during = append(during, r.TaskID)
	}

	pg.Cont()
	stalled = false

	// The same never-seen key works once the store answers again.
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _, _ := ta.timed(t, "GET", "/api/v1/account", fresh, nil)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never-seen key after SIGCONT: still HTTP %d after 15s", code)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Every record written during the stall reaches the database.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline = time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE id = ANY($1)`, append(during, res.TaskID)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == len(during)+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d task records in the database 30s after SIGCONT (writer %+v)", n, len(during)+1, ta.writer.Stats())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := ta.writer.Stats(); st.Dropped != 0 {
		t.Errorf("the writer dropped %d items", st.Dropped)
	}
	_ = nodeID
}

// A PostgreSQL that refuses connections: the leaderboard and reputation
// answer 503 store_unavailable, not 500, and nothing names the database.
func TestStoreRefusedPostgres(t *testing.T) {
	pg := pgtest.StartServer(t)
	ta := startApp(t, func(c *Config) { c.DatabaseURL = pg.URL })
	pg.Close()
	for _, path := range []string{"/api/v1/leaderboard", "/api/v1/reputation/some-node", "/api/v1/benchmark/some-node"} {
		code, ecode, d := ta.timed(t, "GET", path, "", nil)
		if code != http.StatusServiceUnavailable || ecode != "store_unavailable" || d > 3*time.Second {
			t.Errorf("%s with PostgreSQL refusing: HTTP %d %q in %v, want 503 store_unavailable", path, code, ecode, d)
		}
	}
	var status map[string]any
	ta.call(t, "GET", "/api/v1/status", "", nil, &status)
	var health map[string]any
	ta.call(t, "GET", "/api/health", "", nil, &health)
	for what, v := range map[string]any{"status": status, "health": health} {
		raw, _ := json.Marshal(v)
		for _, leak := range []string{"127.0.0.1", "dial ", "user=", "postgres@", "connect"} {
			if strings.Contains(string(raw), leak) {
				t.Errorf("%s %s leaks %q", what, raw, leak)
			}
		}
	}
}
