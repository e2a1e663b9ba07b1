package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/store"
)

func TestServeRefusesBadConfiguration(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--instance-name", "a:b"}, []string{"--instance-name", "must not contain ':'"}},
		{[]string{"--database-url", "mysql://root:sekrit@x/db"}, []string{"--database-url must be a postgres:// URL"}},
		{[]string{"--stream-max", "1s", "--task-timeout", "10s"}, []string{"--stream-max (1s) must not be shorter than --task-timeout (10s)"}},
		{[]string{"--task-timeout", "-1s"}, []string{"--task-timeout"}},
		{[]string{"--max-nodes-per-account", "-3"}, []string{"--max-nodes-per-account must be at least 1"}},
		{[]string{"--default-max-concurrency", "5000"}, []string{"--default-max-concurrency must be from 1 to 1024"}},
		{[]string{"--result-max-bytes", "8000000"}, []string{"--max-message-bytes", "--result-max-bytes"}},
		{[]string{"--request-rate", "-2"}, []string{"--request-rate must be -1 (off) or a positive number"}},
		{[]string{"--ping-interval", "1ms"}, []string{"--ping-interval must be at least 100ms"}},
		{[]string{"--log-level", "loud"}, []string{`--log-level "loud"`, "debug, info, warn or error"}},
		{[]string{"--log-format", "xml"}, []string{`--log-format "xml"`, "text or json"}},
		{[]string{"--task-timeout", "soon"}, []string{"task-timeout", "soon"}},
		{[]string{"extra"}, []string{"serve takes no arguments", `"extra"`, "switchyard serve --help"}},
		{[]string{"--listen", "127.0.0.1:99999"}, []string{"--listen"}},
		{[]string{"--multi-instance=false"}, []string{"--multi-instance=false only matters with --redis-url"}},
		{[]string{"--heartbeat-interval", "5s", "--liveness-ttl", "10s"}, []string{"--heartbeat-interval (5s) must be positive and less than half of --liveness-ttl (10s)"}},
		{[]string{"--pprof-listen", ":6060"}, []string{`--pprof-listen ":6060" is not a loopback address`, "--pprof-allow-remote"}},
		{[]string{"--pprof-listen", "0.0.0.0:6060"}, []string{"is not a loopback address"}},
		{[]string{"--pprof-allow-remote"}, []string{"--pprof-allow-remote only matters with --pprof-listen"}},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		err := serveRefused(t, slices.Concat([]string{"--data-dir", dir}, tc.args)...)
		wantErr(t, strings.Join(tc.args, " "), err, tc.want...)
		if err != nil {
			if msg := err.Error(); strings.Contains(msg, "\n") || strings.Contains(msg, "sekrit") {
				t.Errorf("%q: want one sentence without secrets, got %q", tc.args, msg)
			}
		}
		// Validation comes before the store: nothing was created. (--listen is
		// only checked when binding, once the store is open.)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) && tc.args[0] != "--listen" {
			t.Errorf("%q: the data directory was created (%v) for a configuration that is refused", tc.args, err)
		}
	}

	// Several problems at once: one sentence each.
	err := serveRefused(t, "--data-dir", t.TempDir(), "--instance-name", "a:b", "--ping-interval", "1ms")
	wantErr(t, "two problems", err, "--instance-name", "--ping-interval")
	if err != nil && strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two problems: want two lines, got %q", err)
	}

	// The environment is checked like the flags, and named when it is wrong.
	t.Setenv("SWITCHYARD_STREAM_MAX", "forever")
	err = serveRefused(t, "--data-dir", t.TempDir())
	wantErr(t, "a bad SWITCHYARD_STREAM_MAX", err, `SWITCHYARD_STREAM_MAX="forever"`)
	t.Setenv("SWITCHYARD_STREAM_MAX", "1s")
	err = serveRefused(t, "--data-dir", t.TempDir())
	wantErr(t, "SWITCHYARD_STREAM_MAX=1s", err, "--stream-max (1s) must not be shorter than --task-timeout (1m0s)")
}

// serveRefused runs serve (on a port the system picks) with args and returns
// its error. Should serve start instead of refusing, the test fails at once
// and stops it.
func serveRefused(t *testing.T, args ...string) error {
	t.Helper()
	p := startCLI(t, slices.Concat([]string{"serve", "--listen", "127.0.0.1:0"}, args)...)
	line, err := p.stderr.waitLine(testCtx(t), p.exited, func(l string) bool { return strings.Contains(l, "switchyard is serving") })
	if err == nil {
		t.Errorf("serve %q started instead of refusing: %s", args, line)
		return p.stop(t)
	}
	select {
	case <-p.exited:
		return p.err
	default:
		t.Fatalf("serve %q: %v", args, err)
		return nil
	}
}

// serveProc is a `switchyard serve` running in the test.
type serveProc struct {
	*proc
	base    string // http://127.0.0.1:PORT
	dataDir string
	client  *http.Client
}

// startServe runs serve on a port the system picks, with its data in a
// fresh directory, and returns once it listens. The address comes from the
// "switchyard is serving" log line, so there is no port to guess or race for.
func startServe(t *testing.T, extra ...string) *serveProc {
	t.Helper()
	dir := t.TempDir()
	p := startCLI(t, slices.Concat([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--log-format", "json", "--instance-name", "clitest"}, extra)...)
	line := p.waitLine(t, true, `"switchyard is serving"`)
	var rec struct{ Addr string }
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Addr == "" {
		t.Fatalf("the serving log line has no addr: %q (%v)", line, err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &serveProc{proc: p, base: "http://" + rec.Addr, dataDir: dir, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// do sends a request and returns the status and body.
func (s *serveProc) do(t *testing.T, method, path, key, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

func TestServeRunsAndDrains(t *testing.T) {
	s := startServe(t)
	if code, body := s.do(t, http.MethodGet, "/livez", "", ""); code != http.StatusOK || string(body) != "ok\n" {
		t.Fatalf("GET /livez = %d %q", code, body)
	}
	if code, body := s.do(t, http.MethodGet, "/api/health", "", ""); code != http.StatusOK {
		t.Errorf("GET /api/health = %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "switchyard.db")); err != nil {
		t.Errorf("serve keeps no SQLite file in --data-dir: %v", err)
	}

	start := time.Now()
	if err := s.stop(t); err != nil {
		t.Errorf("serve returned %v after its context was cancelled, want nil (a drain)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("an idle serve took %v to drain", d)
	}
	if !strings.Contains(s.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("serve did not log its stop:\n%s", s.stderr.String())
	}
	// The stop budget was logged at start: what the orchestrator's grace
	// period must exceed.
	if !strings.Contains(s.stderr.String(), `"stop_budget":57000000000`) {
		t.Errorf("serve did not log its stop budget (57s with the defaults):\n%s", s.stderr.String())
	}
	// The port is let go.
	if resp, err := s.client.Get(s.base + "/livez"); err == nil {
		resp.Body.Close()
		t.Error("GET /livez still answers after serve returned")
	}
	// The store was closed and is usable by the next process.
	key := lastLine(t, mustCLI(t, "accounts", "create", "--data-dir", s.dataDir, "--name", "after"))
	if !keyRE.MatchString(key) {
		t.Errorf("accounts create after serve: %q", key)
	}
}

// testAdminToken is the --admin-token of the servers the status test starts.
const testAdminToken = "test-admin-token-0123456789"

func TestStatusOfRunningServer(t *testing.T) {
	s := startServe(t, "--admin-token", testAdminToken)

	out := mustCLI(t, "status", "--url", s.base)
	for _, re := range []string{`(?m)^ready\s+true$`, `(?m)^online_nodes\s+0$`, `(?m)^store\s+sqlite$`, `(?m)^check store\s+ok$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status lacks %s:\n%s", re, out)
		}
	}
	// Who and where the instance is, only with the admin token.
	if strings.Contains(out, "clitest") || strings.Contains(out, "instance_id") {
		t.Errorf("status without the admin token names the instance:\n%s", out)
	}
	out = mustCLI(t, "status", "--url", s.base, "--admin-token", testAdminToken)
	for _, re := range []string{`(?m)^instance_name\s+clitest$`, `(?m)^instance_id\s+[0-9a-f-]{36}$`, `(?m)^addr\s+127\.0\.0\.1:\d+$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status --admin-token lacks %s:\n%s", re, out)
		}
	}
	if _, _, err := cli(t, "status", "--url", s.base, "--admin-token", "not-the-servers-token"); err == nil {
		t.Error("status with a wrong admin token succeeded")
	}

	out = mustCLI(t, "status", "--json", "--url", s.base+"/")
	var got struct {
		Status map[string]any `json:"status"`
		Health map[string]any `json:"health"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("status --json printed %q: %v", out, err)
	}
	if got.Status["status"] != "running" || got.Status["online_nodes"] != 0.0 || got.Health["status"] != "ok" {
		t.Errorf("status --json = %+v", got)
	}

	if err := s.stop(t); err != nil {
		t.Errorf("serve: %v", err)
	}
	_, _, err := cli(t, "status", "--url", s.base)
	wantErr(t, "status of a stopped server", err, "cannot reach "+s.base, "--url")
}

// TestEndToEnd runs serve, creates an account with the CLI on the same data
// directory, runs `switchyard node` with its key and sends it a task.
func TestEndToEnd(t *testing.T) {
	s := startServe(t)
	ctx := testCtx(t)
	key := lastLine(t, mustCLI(t, "accounts", "create", "--data-dir", s.dataDir, "--name", "e2e"))

	ws := "ws" + strings.TrimPrefix(s.base, "http") + "/ws/node"
	node := startCLI(t, "node", "--url", ws, "--api-key", key, "--name", "w1", "--capability", "echo", "--handler", "echo", "--max-concurrency", "2")
	// The node prints its id when the server has registered it, and the
	// server makes it routable before it says so: no polling needed.
	nodeID := strings.TrimPrefix(node.waitLine(t, false, "node_id="), "node_id=")

	code, body := s.do(t, http.MethodGet, "/api/v1/nodes", "", "")
	var nodes []struct {
		NodeID         string   `json:"node_id"`
		Name           string   `json:"name"`
		Capabilities   []string `json:"capabilities"`
		MaxConcurrency int      `json:"max_concurrency"`
	}
	if err := json.Unmarshal(body, &nodes); code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/v1/nodes = %d %s (%v)", code, body, err)
	}
	if len(nodes) != 1 || nodes[0].NodeID != nodeID || nodes[0].Name != "w1" || !slices.Equal(nodes[0].Capabilities, []string{"echo"}) || nodes[0].MaxConcurrency != 2 {
		t.Errorf("GET /api/v1/nodes = %s, want only w1 (%s) serving echo, max 2", body, nodeID)
	}
	if out := mustCLI(t, "status", "--url", s.base); !regexp.MustCompile(`(?m)^online_nodes\s+1$`).MatchString(out) {
		t.Errorf("status with a node online:\n%s", out)
	}

	code, body = s.do(t, http.MethodPost, "/api/v1/request", key, `{"task_type":"echo","content":"hello"}`)
	var res struct {
		TaskID string `json:"task_id"`
		Status string `json:"status"`
		Result string `json:"result"`
		NodeID string `json:"node_id"`
	}
	if err := json.Unmarshal(body, &res); code != http.StatusOK || err != nil {
		t.Fatalf("POST /api/v1/request = %d %s (%v)", code, body, err)
	}
	if res.Status != "completed" || res.Result != "hello" || res.NodeID != nodeID || res.TaskID == "" {
		t.Errorf("POST /api/v1/request = %s, want completed, hello, from %s", body, nodeID)
	}
	if code, body := s.do(t, http.MethodPost, "/api/v1/request", "gn_"+strings.Repeat("0", 32), `{"task_type":"echo","content":"hello"}`); code != http.StatusUnauthorized {
		t.Errorf("a request with an unknown key = %d %s, want 401", code, body)
	}

	if err := node.stop(t); err != nil {
		t.Errorf("node returned %v after its context was cancelled, want nil", err)
	}
	if strings.Contains(node.stderr.String()+node.stdout.String(), key) {
		t.Error("the node printed its API key")
	}
	if err := s.stop(t); err != nil {
		t.Errorf("serve returned %v, want nil", err)
	}
	if strings.Contains(s.stderr.String(), key) {
		t.Error("serve logged an API key")
	}

	// The task was recorded before serve returned (the drain flushes it).
	st, err := store.Open(ctx, store.Options{DataDir: s.dataDir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.Task(ctx, res.TaskID)
	if err != nil || rec.Status != store.StatusCompleted || !slices.Equal(rec.NodeIDs, []string{nodeID}) {
		t.Errorf("the stored task = %+v, %v; want completed by %s", rec, err, nodeID)
	}
}

// A node whose key the server refuses stops at once and says what to check.
func TestNodeRefusedKey(t *testing.T) {
	s := startServe(t)
	key := lastLine(t, mustCLI(t, "accounts", "create", "--data-dir", s.dataDir, "--name", "revoked"))
	// Revoked by its prefix, before the node ever used it (nothing cached).
	mustCLI(t, "keys", "revoke", "--data-dir", s.dataDir, key[:11])

	ws := "ws" + strings.TrimPrefix(s.base, "http") + "/ws/node"
	node := startCLI(t, "node", "--url", ws, "--api-key", key, "--name", "w1", "--capability", "echo")
	select {
	case <-node.exited:
	case <-testCtx(t).Done():
		t.Fatalf("a node with a revoked key still runs:\n%s", node.stderr.String())
	}
	wantErr(t, "a node with a revoked key", node.err, "--api-key")
	if strings.Contains(node.stdout.String(), "node_id=") {
		t.Errorf("a refused node printed an id: %q", node.stdout.String())
	}
}

// --pprof-listen serves profiles on its own loopback port, never on the API's.
func TestServePprof(t *testing.T) {
	s := startServe(t, "--pprof-listen", "127.0.0.1:0")
	line := s.waitLine(t, true, `"profiling endpoint is serving"`)
	var rec struct {
		PprofAddr string `json:"pprof_addr"`
	}
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.PprofAddr == "" {
		t.Fatalf("the profiling log line has no pprof_addr: %q (%v)", line, err)
	}
	resp, err := s.client.Get("http://" + rec.PprofAddr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("GET /debug/pprof/ on --pprof-listen = %d %.200q, want the profile index", resp.StatusCode, body)
	}
	if code, _ := s.do(t, http.MethodGet, "/debug/pprof/", "", ""); code == http.StatusOK {
		t.Error("the API listener serves /debug/pprof/ too")
	}
	if err := s.stop(t); err != nil {
		t.Errorf("serve: %v", err)
	}
	if resp, err := s.client.Get("http://" + rec.PprofAddr + "/debug/pprof/"); err == nil {
		resp.Body.Close()
		t.Error("the profiling endpoint still answers after serve returned")
	}
}

// Without --pprof-listen there is no profiling endpoint anywhere.
func TestServePprofOffByDefault(t *testing.T) {
	s := startServe(t)
	if code, _ := s.do(t, http.MethodGet, "/debug/pprof/", "", ""); code == http.StatusOK {
		t.Error("GET /debug/pprof/ on the API = 200 without --pprof-listen")
	}
	if err := s.stop(t); err != nil {
		t.Errorf("serve: %v", err)
	}
	if strings.Contains(s.stderr.String(), "profiling endpoint") {
		t.Errorf("serve started a profiling endpoint without --pprof-listen:\n%s", s.stderr.String())
	}
}

// `switchyard nodes` lists a running cluster's nodes and pauses, resumes
// and drains one, with the node's account key or the admin token.
func TestNodesCommand(t *testing.T) {
	s := startServe(t, "--admin-token", testAdminToken)
	key := lastLine(t, mustCLI(t, "accounts", "create", "--data-dir", s.dataDir, "--name", "ops"))
	ws := "ws" + strings.TrimPrefix(s.base, "http") + "/ws/node"
	node := startCLI(t, "node", "--url", ws, "--api-key", key, "--name", "w1", "--capability", "echo", "--handler", "echo")
	nodeID := strings.TrimPrefix(node.waitLine(t, false, "node_id="), "node_id=")

	out := mustCLI(t, "nodes", "list", "--url", s.base)
	if !regexp.MustCompile(`(?m)^` + nodeID + `\s+w1\s+serving\s+0/\d+\s+echo\s*$`).MatchString(out) {
		t.Fatalf("nodes list:\n%s", out)
	}
	out = mustCLI(t, "nodes", "pause", "--url", s.base, "--api-key", key, nodeID, "--reason", "disk swap")
	if !strings.Contains(out, "node "+nodeID+" is paused") {
		t.Fatalf("nodes pause printed %q", out)
	}
	out = mustCLI(t, "nodes", "list", "--url", s.base, "--admin-token", testAdminToken)
	if !regexp.MustCompile(nodeID + `\s+w1\s+paused \(disk swap\)\s+0/\d+\s+echo\s+\S+\s+\S+`).MatchString(out) {
		t.Fatalf("nodes list --admin-token after the pause:\n%s", out)
	}
	if _, _, err := cli(t, "nodes", "resume", "--url", s.base, nodeID); err == nil {
		t.Fatal("nodes resume with neither key nor token succeeded")
	}
	_, _, err := cli(t, "nodes", "resume", "--url", s.base, "--api-key", "gn_not_a_key", nodeID)
	wantErr(t, "nodes resume with a wrong key", err, "HTTP 401")
	mustCLI(t, "nodes", "resume", "--url", s.base, "--admin-token", testAdminToken, nodeID)
	if out := mustCLI(t, "nodes", "list", "--url", s.base); !strings.Contains(out, "serving") {
		t.Fatalf("nodes list after the resume:\n%s", out)
	}
	_, _, err = cli(t, "nodes", "drain", "--url", s.base, "--api-key", key)
	wantErr(t, "nodes drain without an id", err, "needs the NODE_ID")
}
