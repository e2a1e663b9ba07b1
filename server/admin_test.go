package server

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/internal/redistest"
	"github.com/switchyard-dev/switchyard/ratelimit"
)

const testAdmin = "admin-token-for-the-tests-0123"

// leaks fails the test if body names any of what public answers must not
// name: the instance's id, its name or host, addresses.
func leaks(t *testing.T, what string, body []byte, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(string(body), s) {
			t.Errorf("%s names %q: %s", what, s, body)
		}
	}
}

// Public answers never name the instance (id, name: by default its host
// name) or where its nodes are; the admin routes, behind the admin token, do. Without a token
// configured there are no admin routes at all.
func TestAdminViewAndPublicAnswers(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.AdminToken, c.InstanceName = testAdmin, "inst-secret-name" })
	key := ta.account(t, "alice", "")
	connectNode(t, ta.wsURL, reg(key, "w", "echo"))
	for _, path := range []string{"/api/v1/status", "/api/health", "/api/v1/nodes"} {
		code, body, _, err := ta.do("GET", path, "", nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, code, err)
		}
		leaks(t, path, body, ta.instanceID, "inst-secret-name", `"instance"`, `"host"`)
	}

	for _, bad := range []string{"", "Bearer wrong-token-wrong-token", "Basic " + testAdmin, testAdmin} {
		req := map[string]string{}
		if bad != "" {
			req["Authorization"] = bad
		}
		code, body := ta.rawGet(t, "/admin/api/status", req)
		if code != http.StatusUnauthorized {
			t.Errorf("/admin/api/status with Authorization %q: %d %s, want 401", bad, code, body)
		}
		leaks(t, "the 401", body, ta.instanceID)
	}
	var st map[string]any
	if code, _ := ta.call(t, "GET", "/admin/api/status", testAdmin, nil, &st); code != 200 ||
		st["instance_id"] != ta.instanceID || st["instance_name"] != "inst-secret-name" || st["addr"] != ta.Addr() {
		t.Fatalf("admin status %d %v", code, st)
	}
	var ns []map[string]any
	if code, _ := ta.call(t, "GET", "/admin/api/nodes", testAdmin, nil, &ns); code != 200 || len(ns) != 1 || ns[0]["instance"] != ta.instanceID {
		t.Fatalf("admin nodes %d %v", code, ns)
	}

	plain := startApp(t, nil)
	if code, _ := plain.rawGet(t, "/admin/api/status", map[string]string{"Authorization": "Bearer " + testAdmin}); code != http.StatusNotFound {
		t.Fatalf("/admin/api/status without --admin-token: %d, want 404", code)
	}
}

// With Redis gone, what a client sees says Redis is unreachable, and
// nothing of its address or the instances' ids; the admin view has the
// dial error.
func TestRedisOutageAnswersLeakNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	db := pgtest.SchemaURL(t, "leak")
	ta := startApp(t, func(c *Config) {
		c.RedisURL, c.DatabaseURL, c.AdminToken = srv.URL(), db, testAdmin
		c.HeartbeatInterval, c.LivenessTTL = 200*time.Millisecond, time.Second
	})
	key := ta.account(t, "alice", "")
	srv.Stop()
	port := srv.Addr()[strings.LastIndexByte(srv.Addr(), ':')+1:]
	secrets := []string{ta.instanceID, srv.Addr(), ":" + port, "dial ", "connection refused"}
	var saw503 bool
	// What is said is judged here, not how soon: the bound is only how long
	// to wait for the watcher (a ping a second, each up to a second).
	deadline := time.Now().Add(30 * time.Second)
	for !saw503 && time.Now().Before(deadline) {
		code, body, _, err := ta.do("GET", "/api/health", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		leaks(t, "/api/health", body, secrets...)
		saw503 = code == http.StatusServiceUnavailable
		time.Sleep(50 * time.Millisecond) // no event for "the instance noticed"
	}
	if !saw503 {
		t.Fatal("/api/health never said 503 with Redis stopped")
	}
	code, body, _, _ := ta.do("POST", "/api/v1/request", key, map[string]any{"task_type": "elsewhere", "content": "x"})
	if code != http.StatusServiceUnavailable {
		t.Errorf("a request no local node can serve, with Redis down: %d %s, want 503", code, body)
	}
	leaks(t, "the 503", body, secrets...)
	_, body, _, _ = ta.do("GET", "/api/v1/status", "", nil)
	leaks(t, "/api/v1/status", body, secrets...)

	var st map[string]any
	ta.call(t, "GET", "/admin/api/status", testAdmin, nil, &st)
	if e, _ := st["redis_error"].(string); !strings.Contains(e, port) {
		t.Errorf("the admin view's redis_error %q does not say what failed where", e)
	}
}

// rawGet sends GET path with exactly the headers given.
func (ta *testApp) rawGet(t *testing.T, path string, headers map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ta.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// manualClock is a clock that moves only when told.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (m *manualClock) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t
}

func (m *manualClock) Add(d time.Duration) {
	m.mu.Lock()
	m.t = m.t.Add(d)
	m.mu.Unlock()
}

// While an address is locked out of the admin routes (too many wrong
// tokens), the right token gets the very answer a wrong one gets, on the
// admin routes and on those that take the admin token or a key (node
// control): a guesser learns nothing from the lockout's answers, so it
// cannot guess on at full speed and see when it hit. Once the lockout has
// passed (the clock moved by its Retry-After), the right token works again.
func TestAdminLockoutAnswersEveryTokenAlike(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	lim := ratelimit.NewMemory(ratelimit.MemoryConfig{Now: clk.Now})
	defer lim.Close()
	auth := newAuthCache(nil, defaultAuthFailures) // no store: a locked-out address never reaches it
	auth.now = clk.Now
	a := &App{cfg: Config{AdminToken: testAdmin}, auth: auth, limiter: lim, log: testLogger(t)}
	e := echo.New()
	e.HTTPErrorHandler = a.handleError
	served := func(c echo.Context) error { return c.String(http.StatusOK, "served") }
	e.GET("/admin/api/status", served, a.requireAdmin)
	e.POST("/api/v1/nodes/:id/pause", served, a.adminOrAccount)
	call := func(method, path, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "192.0.2.7:40000"
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}
	const wrong = "wrong-token-wrong-token"
	if rec := call("GET", "/admin/api/status", testAdmin); rec.Code != http.StatusOK {
		t.Fatalf("the right token before any failure: %d %s", rec.Code, rec.Body)
	}

	var locked *httptest.ResponseRecorder
	for i := 0; i <= defaultAuthFailures.Burst && locked == nil; i++ {
		switch rec := call("GET", "/admin/api/status", wrong); rec.Code {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			locked = rec
		default:
			t.Fatalf("wrong token %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if locked == nil {
		t.Fatalf("no 429 after %d wrong tokens", defaultAuthFailures.Burst+1)
	}
	same := func(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }
	for _, path := range []string{"GET /admin/api/status", "POST /api/v1/nodes/n1/pause"} {
		method, path, _ := strings.Cut(path, " ")
		want := call(method, path, wrong+"-2")
		if want.Code != http.StatusTooManyRequests {
			t.Errorf("locked out, a wrong token on %s: %d %s", path, want.Code, want.Body)
		}
		for _, token := range []string{testAdmin, wrong} {
			rec := call(method, path, token)
			if rec.Code != want.Code || rec.Body.String() != want.Body.String() || !maps.EqualFunc(rec.Header(), want.Header(), same) {
				t.Errorf("locked out, token %q on %s: %d %v %s; a wrong token got %d %v %s",
					token, path, rec.Code, rec.Header(), rec.Body, want.Code, want.Header(), want.Body)
			}
		}
	}

	wait, err := time.ParseDuration(locked.Header().Get("Retry-After") + "s")
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(wait)
	for _, path := range []string{"GET /admin/api/status", "POST /api/v1/nodes/n1/pause"} {
		method, path, _ := strings.Cut(path, " ")
		if rec := call(method, path, testAdmin); rec.Code != http.StatusOK || rec.Body.String() != "served" {
			t.Errorf("the right token on %s once the lockout passed: %d %s", path, rec.Code, rec.Body)
		}
	}
}
