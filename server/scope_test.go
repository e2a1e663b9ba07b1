package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/internal/nodetest"
	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
)

// Scoped keys: a node-only key cannot send requests; a client-only key
// cannot connect a node; a key limited to task types may ask for, and serve,
// only those — on the GemmaNet routes, the OpenAI routes (an alias passes
// over a type the key may not ask for) and node registration.
func TestScopedKeys(t *testing.T) {
	ta := startApp(t, func(c *Config) { c.ModelAliases = map[string][]string{"either": {"echo", "chat"}} })
	ctx := context.Background()
	acct, nodeKey, err := ta.store.CreateAccount(ctx, "scoped", "", "")
	if err != nil {
		t.Fatal(err)
	}
	newKey := func(l store.KeyLimits) string {
		_, key := ta.keyWith(t, acct.ID, l)
		return key
	}
	owner, _ := ta.store.Authenticate(ctx, nodeKey)
	if _, err := ta.store.SetKeyLimits(ctx, owner.KeyID, store.KeyLimits{Use: store.KeyUseNode, TaskTypes: []string{"chat", "echo"}}); err != nil {
		t.Fatal(err)
	}
	clientKey := newKey(store.KeyLimits{Use: store.KeyUseClient})
	chatOnly := newKey(store.KeyLimits{TaskTypes: []string{"chat"}})

	n := connectNode(t, ta.wsURL, reg(nodeKey, "n1", "echo", "chat"))

	// A node-only key sends no request.
	scope := func(what string, code int, raw []byte) {
		t.Helper()
		if code != http.StatusForbidden || !strings.Contains(string(raw), `"key_scope"`) {
			t.Errorf("%s: %d %s, want 403 key_scope", what, code, raw)
		}
	}
	code, raw, _, _ := ta.do("POST", "/api/v1/request", nodeKey, map[string]any{"task_type": "echo", "content": "x"})
	scope("a node key's request", code, raw)
	code, raw, _, _ = ta.do("POST", "/v1/chat/completions", nodeKey, map[string]any{"model": "gemmanet/echo", "messages": userMsg("x")})
	scope("a node key's chat completion", code, raw)

	// A client-only key connects no node: 4001, saying why.
	refused := nodetest.Start(t, ta.wsURL, reg(clientKey, "n2", "echo"))
	if m := refused.Recv(5 * time.Second); m.MsgType != "error" || !strings.Contains(m.Payload["message"].(string), "clients only") {
		t.Errorf("a client key's node got %s %v, want an error saying the key is for clients only", m.MsgType, m.Payload)
	}
	if code := refused.WaitClosed(5 * time.Second); code != wire.CloseAuthFailed {
		t.Errorf("a client key's node closed with %d, want 4001", code)
	}
	// ... but sends requests.
	ch := ta.requestAsync(clientKey, map[string]any{"task_type": "echo", "content": "x"})
	m := nextTask(t, n)
	n.Result(m.TaskID(), "completed", "x")
	if r := waitFor(t, ch, 5*time.Second); r.code != http.StatusOK {
		t.Errorf("a client key's request: %d %s", r.code, r.body)
	}

	// A key limited to chat: echo is refused, chat served, and an alias
	// of echo then chat goes to chat.
	code, raw, _, _ = ta.do("POST", "/api/v1/request", chatOnly, map[string]any{"task_type": "echo", "content": "x"})
	scope("echo with a chat-only key", code, raw)
	code, raw, _, _ = ta.do("POST", "/api/v1/tasks", chatOnly, map[string]any{"task_type": "echo", "content": "x"})
	scope("an async echo with a chat-only key", code, raw)
	code, raw, _, _ = ta.do("POST", "/v1/embeddings", chatOnly, map[string]any{"model": "gemmanet/echo", "input": "x"})
	scope("an embedding of echo with a chat-only key", code, raw)
	for _, model := range []string{"gemmanet/chat", "either"} {
		ch := async(func() reply {
			code, b, _, err := ta.do(http.MethodPost, "/v1/chat/completions", chatOnly, map[string]any{"model": model, "messages": userMsg("x")})
			return reply{code, b, err}
		})
		m := nextTask(t, n)
		if m.Payload["task_type"] != "chat" {
			t.Errorf("model %s with a chat-only key: a task of type %v", model, m.Payload["task_type"])
		}
		n.Result(m.TaskID(), "completed", "x")
		if r := waitFor(t, ch, 5*time.Second); r.code != http.StatusOK {
			t.Errorf("model %s with a chat-only key: %d %s", model, r.code, r.body)
		}
	}

	// A node whose key may serve chat and echo cannot declare more.
	wide := nodetest.Start(t, ta.wsURL, reg(nodeKey, "n3", "chat", "translate"))
	if m := wide.Recv(5 * time.Second); m.MsgType != "error" || !strings.Contains(m.Payload["message"].(string), `"translate"`) {
		t.Errorf("a node beyond its key's task types got %s %v, want an error naming translate", m.MsgType, m.Payload)
	}
	if code := wide.WaitClosed(5 * time.Second); code != wire.ClosePolicy {
		t.Errorf("a node beyond its key's task types closed with %d, want 1008", code)
	}
}

// scopeKinds are the credentials TestKeyScopesOnEveryRoute sends: API keys
// of each kind (limits nil: no key of that kind, just the bearer text),
// in an order that leaves the one key that may delete the account for
// last.
var scopeKinds = []struct {
	name   string
	limits *store.KeyLimits
}{
	{"no key", nil},
	{"admin token", nil},
	{"node key", &store.KeyLimits{Use: store.KeyUseNode}},
	{"client key", &store.KeyLimits{Use: store.KeyUseClient}},
	{"client key with task types", &store.KeyLimits{Use: store.KeyUseClient, TaskTypes: []string{"chat", "probe"}}},
	{"key with task types", &store.KeyLimits{TaskTypes: []string{"chat", "probe"}}},
	{"unrestricted key", &store.KeyLimits{}},
}

// scopeAllows is which credentials each scope lets in, written out rather
// than derived from checkScope's rules, so that the test states them.
var scopeAllows = map[scope][]string{
	scopePublic:         {"no key", "admin token", "node key", "client key", "client key with task types", "key with task types", "unrestricted key"},
	scopeAdmin:          {"admin token"},
	scopeNodeSocket:     {"node key", "key with task types", "unrestricted key"},
	scopeAnyKey:         {"node key", "client key", "client key with task types", "key with task types", "unrestricted key"},
	scopeClient:         {"client key", "client key with task types", "key with task types", "unrestricted key"},
	scopeClientOwn:      {"client key", "client key with task types", "key with task types", "unrestricted key"},
	scopeAccount:        {"unrestricted key"},
	scopeAccountOrAdmin: {"admin token", "unrestricted key"},
}

// Every route the router has is in the scope table, and answers each kind
// of key as its row says: let through (anything but 401, 403 or 429: a
// made-up id may well be 404), or refused — 403 key_scope naming the key
// the route needs for an API key of the wrong kind, 401 for no key, for
// the admin token on a key's route and for a key on an admin route. The
// App has every route: the admin token set (admin API, dashboard), the
// task streams, open registration.
func TestKeyScopesOnEveryRoute(t *testing.T) {
	const adminToken = "admin-token-for-the-scope-walk"
	ta := startApp(t, func(c *Config) {
		c.AdminToken = adminToken
		c.OpenRegistration = true
		// Each request comes from its own address (X-Forwarded-For):
		// requireAdmin counts a key's failures against its address.
		c.TrustProxy = true
	})
	ctx := context.Background()
	var sent int
	send := func(method, path, bearer string) (int, apiErr) {
		t.Helper()
		if method == echo.RouteNotFound {
			method = http.MethodGet
		}
		var body io.Reader
		if method != http.MethodGet && method != http.MethodHead {
			body = strings.NewReader(`{"task_type": "chat", "content": "x"}`)
		}
		req, err := http.NewRequest(method, ta.url+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		req.Header.Set("Content-Type", "application/json")
		sent++
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.%d.%d", sent/250, 1+sent%250))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e apiErr
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &e)
		return resp.StatusCode, e
	}
	// keysFor gives a fresh account keys of each kind: a route that
	// deletes its account leaves the next route's keys working.
	accounts := 0
	keysFor := func() map[string]string {
		t.Helper()
		accounts++
		acct, first, err := ta.store.CreateAccount(ctx, fmt.Sprintf("walk-%d", accounts), "", "")
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{"admin token": adminToken}
		for _, k := range scopeKinds {
			switch {
			case k.limits == nil:
			case !k.limits.Unrestricted():
				ak, key, err := ta.store.CreateKey(ctx, acct.ID)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ta.store.SetKeyLimits(ctx, ak.ID, *k.limits); err != nil {
					t.Fatal(err)
				}
				keys[k.name] = key
			default:
				keys[k.name] = first
			}
		}
		return keys
	}
	fill := strings.NewReplacer(":id", "no-such-id", ":node_id", "no-such-node", ":key", "no-such-key", ":file", "no-such-file", "*", "no-such-path")

	registered := map[routeKey]bool{}
	for _, r := range ta.echo.Routes() {
		registered[routeKey{r.Method, r.Path}] = true
		s := scopeOf(r.Method, r.Path)
		route := r.Method + " " + r.Path
		if s == scopeNone {
			t.Errorf("%s has no row in scopeTable (server/scope.go): say which keys may use it", route)
			continue
		}
		keys := keysFor()
		for _, k := range scopeKinds {
			allowed := slices.Contains(scopeAllows[s], k.name)
			if s == scopeNodeSocket {
				// The socket takes its key in node_register.
				n := nodetest.Start(t, ta.wsURL, reg(keys[k.name], "probe", "probe"))
				m := n.Recv(5 * time.Second)
				switch {
				case allowed && m.MsgType != "node_registered":
					t.Errorf("%s with a %s: %s %v, want node_registered", route, k.name, m.MsgType, m.Payload)
				case !allowed && m.MsgType != "error":
					t.Errorf("%s with a %s: %s %v, want an error", route, k.name, m.MsgType, m.Payload)
				case !allowed:
					// No key at all is a malformed node_register (1008).
					want := wire.CloseAuthFailed
					if keys[k.name] == "" {
						want = wire.ClosePolicy
					}
					if code := n.WaitClosed(5 * time.Second); int(code) != want {
						t.Errorf("%s with a %s closed with %d, want %d", route, k.name, code, want)
					}
				}
				_ = n.Conn.CloseNow()
				continue
			}
			code, e := send(r.Method, fill.Replace(r.Path), keys[k.name])
			switch {
			case allowed:
				if code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusTooManyRequests {
					t.Errorf("%s with a %s: %d %s %q, want it let through", route, k.name, code, e.Error.Code, e.Error.Message)
				}
			case k.limits != nil && s != scopeAdmin:
				need := map[scope]string{scopeClient: "needs a client key", scopeClientOwn: "needs a client key",
					scopeAccount: "needs an unrestricted key", scopeAccountOrAdmin: "needs an unrestricted key"}[s]
				// A HEAD answer has no body to say why: its status says it.
				said := r.Method == http.MethodHead || e.Error.Code == string(CodeKeyScope) && strings.Contains(e.Error.Message, need)
				if code != http.StatusForbidden || need == "" || !said {
					t.Errorf("%s with a %s: %d %s %q, want 403 key_scope saying it %s", route, k.name, code, e.Error.Code, e.Error.Message, need)
				}
			default:
				if code != http.StatusUnauthorized {
					t.Errorf("%s with a %s: %d %s %q, want 401", route, k.name, code, e.Error.Code, e.Error.Message)
				}
			}
		}
	}
	// ... and the table has no row of a route that is not there.
	for _, r := range scopeTable {
		if !registered[routeKey{r.method, r.path}] {
			t.Errorf("scopeTable has %s %s, which the router does not: remove the row, or turn on what adds the route here", r.method, r.path)
		}
	}
}

// A node key (the key a worker machine holds) connects its node and reads
// its account's summary, and is refused everything else of the account:
// async tasks (submit, read, stream, cancel), usage, the webhook secret,
// node control, deleting the account. The unrestricted key of the same
// account still does each.
func TestNodeKeyManagesNothing(t *testing.T) {
	ta := startApp(t, nil)
	ctx := context.Background()
	acct, full, err := ta.store.CreateAccount(ctx, "worker-owner", "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, nodeKey := ta.keyWith(t, acct.ID, store.KeyLimits{Use: store.KeyUseNode})
	n := connectNode(t, ta.wsURL, reg(nodeKey, "worker", "echo"))

	var submitted struct {
		TaskID string `json:"task_id"`
	}
	// chat: no node serves it, so the task stays queued for the test.
	task := map[string]any{"task_type": "chat", "content": "x", "stream": true}
	if code, _ := ta.call(t, "POST", "/api/v1/tasks", full, task, &submitted); code != http.StatusAccepted {
		t.Fatalf("the unrestricted key's async task: %d", code)
	}
	calls := []struct {
		method, path string
		body         any
		want         int // with the unrestricted key
	}{
		{"POST", "/api/v1/tasks", task, http.StatusAccepted},
		{"GET", "/api/v1/tasks/" + submitted.TaskID, nil, http.StatusOK},
		{"HEAD", "/api/v1/tasks/" + submitted.TaskID + "/stream", nil, http.StatusOK},
		{"GET", "/api/v1/usage?group_by=key", nil, http.StatusOK},
		{"POST", "/api/v1/nodes/" + n.ID + "/pause", nil, http.StatusOK},
		{"POST", "/api/v1/webhook-secret", nil, http.StatusOK},
		{"DELETE", "/api/v1/tasks/" + submitted.TaskID, nil, http.StatusOK},
		{"DELETE", "/api/v1/account", nil, http.StatusOK},
	}
	for _, c := range calls {
		code, raw, _, err := ta.do(c.method, c.path, nodeKey, c.body)
		if err != nil {
			t.Fatal(err)
		}
		// HEAD has no body to say why: its status says it.
		if code != http.StatusForbidden || c.method != "HEAD" && !strings.Contains(string(raw), `"key_scope"`) {
			t.Errorf("%s %s with the node key: %d %s, want 403 key_scope", c.method, c.path, code, raw)
		}
	}
	// What it may do: read the account's summary.
	if code, raw, _, _ := ta.do("GET", "/api/v1/account", nodeKey, nil); code != http.StatusOK {
		t.Errorf("GET /api/v1/account with the node key: %d %s", code, raw)
	}
	// Nothing the node key asked for happened: the account, the task and
	// the node are as they were, and the unrestricted key does each.
	for _, c := range calls {
		code, raw, _, err := ta.do(c.method, c.path, full, c.body)
		if err != nil {
			t.Fatal(err)
		}
		if code != c.want {
			t.Errorf("%s %s with the unrestricted key: %d %s, want %d", c.method, c.path, code, raw, c.want)
		}
	}
	if code, _, _, _ := ta.do("GET", "/api/v1/account", nodeKey, nil); code != http.StatusUnauthorized {
		t.Errorf("the node key after its account was deleted: %d, want 401", code)
	}
}

// A scoped key reads and cancels only the tasks it asked for — async,
// running here or finished — and sees only its own usage; the account's
// unrestricted key sees them all.
func TestScopedKeyReadsOnlyItsOwn(t *testing.T) {
	ta := startApp(t, nil)
	ctx := context.Background()
	acct, full, err := ta.store.CreateAccount(ctx, "tenants", "", "")
	if err != nil {
		t.Fatal(err)
	}
	keyID := map[string]string{}
	scoped := func(l store.KeyLimits) string {
		id, key := ta.keyWith(t, acct.ID, l)
		keyID[key] = id
		return key
	}
	mine := scoped(store.KeyLimits{Use: store.KeyUseClient})
	other := scoped(store.KeyLimits{TaskTypes: []string{"echo", "chat"}})
	status := func(method, path, key string, body any) int {
		t.Helper()
		code, _, _, err := ta.do(method, path, key, body)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	expect := func(what, method, path string, want map[string]int) {
		t.Helper()
		for _, k := range []struct{ name, key string }{{"its own key", mine}, {"another scoped key", other}, {"the unrestricted key", full}} {
			if code := status(method, path, k.key, nil); code != want[k.name] {
				t.Errorf("%s, %s %s with %s: %d, want %d", what, method, path, k.name, code, want[k.name])
			}
		}
	}
	own := map[string]int{"its own key": 200, "another scoped key": 404, "the unrestricted key": 200}

	// An async task, queued (no node serves chat).
	var sub struct {
		TaskID string `json:"task_id"`
	}
	if code, _ := ta.call(t, "POST", "/api/v1/tasks", mine, map[string]any{"task_type": "chat", "content": "x", "stream": true}, &sub); code != http.StatusAccepted {
		t.Fatalf("submit: %d", code)
	}
	expect("an async task", "GET", "/api/v1/tasks/"+sub.TaskID, own)
	expect("an async task's stream", "HEAD", "/api/v1/tasks/"+sub.TaskID+"/stream", own)
	if code := status("DELETE", "/api/v1/tasks/"+sub.TaskID, other, nil); code != http.StatusNotFound {
		t.Errorf("cancelling another key's task: %d, want 404", code)
	}
	if code := status("DELETE", "/api/v1/tasks/"+sub.TaskID, mine, nil); code != http.StatusOK {
		t.Errorf("cancelling its own task: %d, want 200", code)
	}

	// A task running here.
	n := connectNode(t, ta.wsURL, reg(full, "n1", "echo"))
	ch := ta.requestAsync(mine, map[string]any{"task_type": "echo", "content": "x"})
	m := nextTask(t, n)
	expect("a running task", "GET", "/api/v1/tasks/"+m.TaskID(), own)
	n.Result(m.TaskID(), "completed", "x")
	if r := waitFor(t, ch, 5*time.Second); r.code != http.StatusOK {
		t.Fatalf("the request: %d %s", r.code, r.body)
	}

	// Finished tasks of each key, in the history and the usage ledger.
	now := time.Now().UTC()
	var recs []store.TaskRecord
	for i, key := range []string{mine, mine, other} {
		recs = append(recs, store.TaskRecord{ID: fmt.Sprintf("done-%d", i), AccountID: acct.ID, KeyID: keyID[key], TaskType: "echo",
			Status: store.StatusCompleted, NodeIDs: []string{}, CreatedAt: now, FinishedAt: now})
	}
	if err := ta.store.WriteTasks(ctx, recs); err != nil {
		t.Fatal(err)
	}
	expect("a finished task", "GET", "/api/v1/tasks/done-0", own)

	requests := func(key string) map[string]int64 {
		t.Helper()
		var v struct {
			Rows []store.UsageRow `json:"rows"`
		}
		if code, _ := ta.call(t, "GET", "/api/v1/usage?group_by=key", key, nil, &v); code != http.StatusOK {
			t.Fatalf("usage: %d", code)
		}
		out := map[string]int64{}
		for _, r := range v.Rows {
			out[r.KeyID] += r.Requests
		}
		return out
	}
	if got := requests(mine); len(got) != 1 || got[keyID[mine]] < 2 {
		t.Errorf("a client key's usage by key: %v, want its own key's row alone", got)
	}
	if got := requests(other); len(got) != 1 || got[keyID[other]] != 1 {
		t.Errorf("a key with task types' usage by key: %v, want its own key's row alone", got)
	}
	if got := requests(full); got[keyID[mine]] < 2 || got[keyID[other]] != 1 {
		t.Errorf("the unrestricted key's usage by key: %v, want every key's", got)
	}
}

// docs/PROTOCOL.md's "Key scopes" table is scopeTable: the same routes,
// each answering as its scope does.
func TestScopeTableDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n### Key scopes\n")
	if !ok {
		t.Fatal(`docs/PROTOCOL.md has no "### Key scopes" section`)
	}
	section, _, _ = strings.Cut(section, "\n### ")
	cells := map[scope]string{ // no key, node key, client key, unrestricted key, admin token
		scopePublic:         "yes | yes | yes | yes | yes",
		scopeAdmin:          "401 | 401 | 401 | 401 | yes",
		scopeNodeSocket:     "1008 | yes | 4001 | yes | 4001",
		scopeAnyKey:         "401 | yes | yes | yes | 401",
		scopeClient:         "401 | 403 | yes | yes | 401",
		scopeClientOwn:      "401 | 403 | its own | the account's | 401",
		scopeAccount:        "401 | 403 | 403 | yes | 401",
		scopeAccountOrAdmin: "401 | 403 | 403 | yes | yes",
	}
	param := regexp.MustCompile(`\{(\w+)\}`)
	documented := map[routeKey]bool{}
	for _, line := range strings.Split(section, "\n") {
		route, rest, ok := strings.Cut(strings.TrimPrefix(line, "| `"), "` | ")
		if !ok || !strings.HasPrefix(line, "| `") {
			continue
		}
		method, path, _ := strings.Cut(route, " ")
		path = param.ReplaceAllString(path, ":$1")
		k := routeKey{method, path}
		documented[k] = true
		s := scopeOf(method, path)
		if s == scopeNone {
			t.Errorf("docs/PROTOCOL.md's key scopes list %s, which scopeTable has not", route)
			continue
		}
		if got, want := strings.TrimSuffix(rest, " |"), cells[s]; got != want {
			t.Errorf("docs/PROTOCOL.md's key scopes: %s is %q, want %q", route, got, want)
		}
	}
	for _, r := range scopeTable {
		if r.method != echo.RouteNotFound && !documented[routeKey{r.method, r.path}] {
			t.Errorf("docs/PROTOCOL.md's key scopes have no row for %s %s", r.method, r.path)
		}
	}
}

// BenchmarkCheckScope is what the scope check adds to every keyed request:
// one map lookup, no allocation when the key is let through.
func BenchmarkCheckScope(b *testing.B) {
	c := echo.New().NewContext(httptest.NewRequest(http.MethodPost, "/api/v1/request", nil), httptest.NewRecorder())
	c.SetPath("/api/v1/request")
	l := store.KeyLimits{Use: store.KeyUseClient}
	b.ReportAllocs()
	for b.Loop() {
		if err := checkScope(c, l); err != nil {
			b.Fatal(err)
		}
	}
}
