package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Response is an HTTP answer.
type Response struct {
	Code   int
	Body   []byte
	Header http.Header
}

// Decode unmarshals the body into v.
func (r *Response) Decode(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("HTTP %d body %q: %w", r.Code, r.Body, err)
	}
	return nil
}

// ErrorCode is the error.code of an error body, or "".
func (r *Response) ErrorCode() string {
	var e APIError
	_ = json.Unmarshal(r.Body, &e)
	return e.Error.Code
}

// APIError is switchyard's error body.
type APIError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Detail string `json:"detail"`
}

// Do sends one HTTP request to the instance. It is safe from any goroutine.
// Without a deadline in ctx, it gives up after 10 s.
func (i *Instance) Do(ctx context.Context, method, path, key string, body any) (*Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, i.URL()+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := i.c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Code: resp.StatusCode, Body: b, Header: resp.Header}, nil
}

// Request sends POST /api/v1/request {task_type, content}.
func (i *Instance) Request(ctx context.Context, key, taskType, content string) (*Response, error) {
	return i.Do(ctx, http.MethodPost, "/api/v1/request", key, map[string]any{"task_type": taskType, "content": content})
}

// get fetches path (with the admin token: it is sent only to /admin/
// routes) and decodes its 200 answer into out, failing the test otherwise.
func (i *Instance) get(path string, out any) {
	i.t.Helper()
	token := ""
	if strings.HasPrefix(path, "/admin/") {
		token = AdminToken
	}
	r, err := i.Do(context.Background(), http.MethodGet, path, token, nil)
	if err != nil {
		i.t.Fatalf("instance %s: GET %s: %v", i.Name, path, err)
	}
	if r.Code != http.StatusOK {
		i.t.Fatalf("instance %s: GET %s: HTTP %d %s", i.Name, path, r.Code, r.Body)
	}
	if err := r.Decode(out); err != nil {
		i.t.Fatalf("instance %s: GET %s: %v", i.Name, path, err)
	}
}

// Status is GET /admin/api/status (the fields the tests read): the public
// status and the instance's id and name.
type Status struct {
	Status         string `json:"status"`
	OnlineNodes    int    `json:"online_nodes"`
	InstanceID     string `json:"instance_id"`
	InstanceName   string `json:"instance_name"`
	Ready          bool   `json:"ready"`
	TasksInFlight  int    `json:"tasks_in_flight"`
	LocalNodes     int    `json:"local_nodes"`
	Store          string `json:"store"`
	Mode           string `json:"mode"`
	Instances      int    `json:"instances"`
	NotReadyReason string `json:"not_ready_reason"`
}

// Status fetches /admin/api/status.
func (i *Instance) Status() Status {
	i.t.Helper()
	var s Status
	i.get("/admin/api/status", &s)
	return s
}

// NodeView is one entry of GET /admin/api/nodes (the public list leaves
// out Instance).
type NodeView struct {
	NodeID         string   `json:"node_id"`
	Name           string   `json:"name"`
	Capabilities   []string `json:"capabilities"`
	MaxConcurrency int      `json:"max_concurrency"`
	Instance       string   `json:"instance"`
	Trust          string   `json:"trust"`
	ActiveTasks    int      `json:"active_tasks"` // for a node on another instance, as its owner last wrote
}

// Nodes fetches /admin/api/nodes.
func (i *Instance) Nodes() []NodeView {
	i.t.Helper()
	var ns []NodeView
	i.get("/admin/api/nodes", &ns)
	return ns
}

// Health is GET /api/health.
type Health struct {
	Status string            `json:"status"`
	Reason string            `json:"reason"`
	Checks map[string]string `json:"checks"`
}

// Health fetches /api/health; err is a transport error.
func (i *Instance) Health(ctx context.Context) (int, Health, error) {
	r, err := i.Do(ctx, http.MethodGet, "/api/health", "", nil)
	if err != nil {
		return 0, Health{}, err
	}
	var h Health
	if err := r.Decode(&h); err != nil {
		return r.Code, h, err
	}
	return r.Code, h, nil
}

// Eventually polls cond every interval until it reports true, and fails
// the test with cond's last description if d passes first. For state that
// has no event to wait on (another process's view of the cluster).
func Eventually(t testing.TB, d, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, state)
		}
		time.Sleep(interval)
	}
}

// WaitNodes polls /api/v1/nodes until cond accepts the list.
func (i *Instance) WaitNodes(d time.Duration, what string, cond func([]NodeView) bool) []NodeView {
	i.t.Helper()
	var last []NodeView
	Eventually(i.t, d, 25*time.Millisecond, func() (bool, string) {
		last = i.Nodes()
		return cond(last), fmt.Sprintf("instance %s lists %+v, want %s", i.Name, last, what)
	})
	return last
}
