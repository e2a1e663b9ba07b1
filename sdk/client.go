package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls the coordinator's HTTP API. It is safe for concurrent use.
type Client struct {
	baseURL string
	apiKey  string
	hc      *http.Client
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the Client use hc (default: a client with no overall
// timeout, since streams may last minutes; bound calls with their ctx).
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) { c.hc = hc }
}

// NewClient returns a client for the API at baseURL (http://host:port). The
// key may be empty for the endpoints that need none (Status, Nodes).
func NewClient(baseURL, apiKey string, opts ...ClientOption) *Client {
	c := &Client{baseURL: strings.TrimRight(baseURL, "/"), apiKey: apiKey, hc: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Request is a task to run (POST /api/v1/request).
type Request struct {
	TaskType string         `json:"task_type"`
	Content  string         `json:"content"`
	Params   map[string]any `json:"params,omitempty"`
	Trust    string         `json:"trust,omitempty"` // "any" (default) or "official"
}

// TaskResult is a finished task. A handler's failure is a TaskResult with
// Status "failed" and the handler's error text in Result, not an error.
type TaskResult struct {
	TaskID           string `json:"task_id"`
	Status           string `json:"status"`
	Result           string `json:"result"`
	NodeID           string `json:"node_id"`
	ProcessingTimeMs int64  `json:"processing_time_ms"`
	Usage            *Usage `json:"usage"`
	// Attempts is how many nodes switchyard handed the task when its first
	// node failed it and it ran again on another; 0 when the first node
	// answered (the server sends it only then).
	Attempts int `json:"attempts,omitempty"`
}

// UnmarshalJSON accepts processing_time_ms as a fraction too, as a server
// written in Python may send it.
func (r *TaskResult) UnmarshalJSON(b []byte) error {
	type plain TaskResult
	var v struct {
		plain
		ProcessingTimeMs float64 `json:"processing_time_ms"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = TaskResult(v.plain)
	r.ProcessingTimeMs = int64(math.Round(v.ProcessingTimeMs))
	return nil
}

// RateResult is the answer to Rate.
type RateResult struct {
	Status  string   `json:"status"` // "rated"
	NodeIDs []string `json:"node_ids"`
	Rating  int      `json:"rating"`
}

// ServiceStatus is the answer to Status.
type ServiceStatus struct {
	Status          string `json:"status"`
	Version         string `json:"version"`
	OnlineNodes     int    `json:"online_nodes"`
	TotalTasksToday int    `json:"total_tasks_today"`
}

// NodeInfo is one online node as listed by Nodes.
type NodeInfo struct {
	NodeID       string         `json:"node_id"`
	Name         string         `json:"name"`
	Capabilities []string       `json:"capabilities"`
	Languages    []string       `json:"languages"`
	ModelInfo    map[string]any `json:"model_info"`
	Trust        string         `json:"trust"`
	CPUPercent   float64        `json:"cpu_percent,omitempty"`
	ActiveTasks  int            `json:"active_tasks,omitempty"`
	// MaxConcurrency is switchyard's extension; GemmaNet does not send it.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Online and Load are the fields of GemmaNet's NodeInfo: every listed
	// node is online, and Load is the fraction of its slots in use (0 to 1).
	// A server that sends neither (GemmaNet's) reads as online, load 0, the
	// defaults of GemmaNet's NodeInfo.
	Online bool    `json:"online"`
	Load   float64 `json:"load"`
}

// UnmarshalJSON reads a listed node, online unless it says otherwise.
func (n *NodeInfo) UnmarshalJSON(b []byte) error {
	type plain NodeInfo // without this method
	p := plain{Online: true}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*n = NodeInfo(p)
	return nil
}

// TaskInfo is a task's record (GET /api/v1/tasks/{id}).
type TaskInfo struct {
	TaskID           string     `json:"task_id"`
	Status           string     `json:"status"`
	ErrorCode        string     `json:"error_code,omitempty"`
	NodeIDs          []string   `json:"node_ids"`
	CreatedAt        time.Time  `json:"created_at"`
	FinishedAt       *time.Time `json:"finished_at,omitempty"` // nil while running
	ProcessingTimeMs int64      `json:"processing_time_ms"`
}

// requestBody is what POST /api/v1/request takes.
type requestBody struct {
	Request
	Stream bool `json:"stream"`
}

// Request runs a task and waits for its result.
func (c *Client) Request(ctx context.Context, req Request) (*TaskResult, error) {
	var out TaskResult
	if err := c.do(ctx, http.MethodPost, "/api/v1/request", requestBody{Request: req}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Rate rates a finished task from 1 to 5.
func (c *Client) Rate(ctx context.Context, taskID string, rating int) (*RateResult, error) {
	body := map[string]any{"task_id": taskID, "rating": rating}
	var out RateResult
	if err := c.do(ctx, http.MethodPost, "/api/v1/rate", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Status returns the service's status.
func (c *Client) Status(ctx context.Context) (*ServiceStatus, error) {
	var out ServiceStatus
	if err := c.do(ctx, http.MethodGet, "/api/v1/status", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Nodes lists the online nodes, only those with capability if it is not "".
func (c *Client) Nodes(ctx context.Context, capability string) ([]NodeInfo, error) {
	path := "/api/v1/nodes"
	if capability != "" {
		path += "?capability=" + url.QueryEscape(capability)
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, path, nil, &raw); err != nil {
		return nil, err
	}
	// GemmaNet answers with a bare list; accept {"nodes": [...]} as well.
	var out []NodeInfo
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		var wrapped struct {
			Nodes []NodeInfo `json:"nodes"`
		}
		err := json.Unmarshal(raw, &wrapped)
		return wrapped.Nodes, decodeErr(err)
	}
	err := json.Unmarshal(raw, &out)
	return out, decodeErr(err)
}

// Task returns the record of a task.
func (c *Client) Task(ctx context.Context, id string) (*TaskInfo, error) {
	var out TaskInfo
	if err := c.do(ctx, http.MethodGet, "/api/v1/tasks/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// newRequest builds a request to the API with the key and JSON body set.
func (c *Client) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("sdk: encode request: %w", err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, r)
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return req, nil
}

// do sends a JSON request and decodes a 2xx answer into out; any other
// status becomes an *APIError.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	req, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("sdk: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return parseAPIError(resp)
	}
	return decodeErr(json.NewDecoder(resp.Body).Decode(out))
}

func decodeErr(err error) error {
	if err != nil {
		return fmt.Errorf("sdk: decode response: %w", err)
	}
	return nil
}

// ErrStreamIncomplete is returned by Stream when the event stream ended
// without a done or error event (the connection was cut).
var ErrStreamIncomplete = errors.New("sdk: the stream ended without a result")

// streamEvent is one SSE event of a streaming request.
type streamEvent struct {
	Delta  *string       `json:"delta"`
	Done   bool          `json:"done"`
	Result *TaskResult   `json:"result"`
	Error  *ErrorPayload `json:"error"`
	TaskID string        `json:"task_id"`
}

// Stream runs a task with streaming and calls onDelta (if not nil) with each
// piece of the result as it arrives, then returns the final result. An error
// event in the stream is returned as an *APIError whose Status is the
// stream's HTTP status (200) and whose Code is the event's (timeout,
// node_disconnected, result_too_large, task_failed). If onDelta returns an
// error, the request is abandoned (the server then cancels the task) and
// Stream returns that error.
func (c *Client) Stream(ctx context.Context, req Request, onDelta func(delta string) error) (*TaskResult, error) {
	hreq, err := c.newRequest(ctx, http.MethodPost, "/api/v1/request", requestBody{Request: req, Stream: true})
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("sdk: POST /api/v1/request: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, parseAPIError(resp)
	}
	events := newSSEReader(resp.Body)
	for {
		data, err := events.next()
		if errors.Is(err, io.EOF) {
			return nil, ErrStreamIncomplete
		}
		if err != nil {
			return nil, fmt.Errorf("sdk: read stream: %w", err)
		}
		var ev streamEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, fmt.Errorf("sdk: malformed stream event: %w", err)
		}
		switch {
		case ev.Error != nil:
			return nil, &APIError{Status: resp.StatusCode, Code: ev.Error.Code, Message: ev.Error.Message, TaskID: ev.TaskID}
		case ev.Done:
			if ev.Result == nil {
				return nil, errors.New("sdk: stream done event without a result")
			}
			return ev.Result, nil
		case ev.Delta != nil && onDelta != nil:
			if err := onDelta(*ev.Delta); err != nil {
				return nil, err
			}
		}
	}
}
