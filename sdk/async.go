package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// AsyncTask is a task to queue (POST /api/v1/tasks): it waits in the
// coordinator's store until a node is free, and outlives the call.
type AsyncTask struct {
	TaskType string         `json:"task_type"`
	Content  string         `json:"content"`
	Params   map[string]any `json:"params,omitempty"`
	Trust    string         `json:"trust,omitempty"` // "any" (default) or "official"
	// Priority is 0–9, higher first; nil: the server's default (5).
	Priority *int `json:"priority,omitempty"`
	// TTL is how long the ended task is kept (whole seconds at least;
	// 0: the server's default, 24h; at most 168h).
	TTL time.Duration `json:"-"`
	// WebhookURL, if set, is told of the task's end.
	WebhookURL string `json:"webhook_url,omitempty"`
	Stream     bool   `json:"stream,omitempty"`
}

// AsyncView is an async task as GET /api/v1/tasks/{id} answers it.
type AsyncView struct {
	TaskID           string        `json:"task_id"`
	Status           string        `json:"status"` // queued, running, completed, failed, cancelled
	TaskType         string        `json:"task_type"`
	Priority         int           `json:"priority"`
	CreatedAt        time.Time     `json:"created_at"`
	StartedAt        *time.Time    `json:"started_at"`
	FinishedAt       *time.Time    `json:"finished_at"`
	ExpiresAt        *time.Time    `json:"expires_at"`
	NodeID           string        `json:"node_id"`
	Attempts         int           `json:"attempts"`
	Result           string        `json:"result"`
	Error            *ErrorPayload `json:"error"`
	ProcessingTimeMs int64         `json:"processing_time_ms"`
	Usage            *Usage        `json:"usage"`
}

// Final reports whether the task's status never changes again.
func (v *AsyncView) Final() bool {
	switch v.Status {
	case "completed", "failed", "cancelled":
		return true
	}
	return false
}

// SubmitTask queues a task and returns its id.
func (c *Client) SubmitTask(ctx context.Context, t AsyncTask) (string, error) {
	body := struct {
		AsyncTask
		TTL string `json:"ttl,omitempty"`
	}{AsyncTask: t}
	if t.TTL > 0 {
		body.TTL = t.TTL.String()
	}
	var out struct {
		TaskID string `json:"task_id"`
	}
	if err := c.do(ctx, http.MethodPost, "/api/v1/tasks", body, &out); err != nil {
		return "", err
	}
	return out.TaskID, nil
}

// maxWait is the longest one long-poll the server holds (?wait).
const maxWait = 60 * time.Second

// WaitTask long-polls a task until its status is final or ctx ends; each
// poll asks the server to hold it up to wait (0 or over 60s: 60s). It
// returns the final view, or ctx's error with the last view read.
func (c *Client) WaitTask(ctx context.Context, id string, wait time.Duration) (*AsyncView, error) {
	if wait <= 0 || wait > maxWait {
		wait = maxWait
	}
	var last *AsyncView
	for {
		var v AsyncView
		path := "/api/v1/tasks/" + url.PathEscape(id) + "?wait=" + url.QueryEscape(wait.String())
		if err := c.do(ctx, http.MethodGet, path, nil, &v); err != nil {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			return last, err
		}
		last = &v
		if v.Final() {
			return last, nil
		}
		if err := ctx.Err(); err != nil {
			return last, err
		}
	}
}

// CancelTask cancels a task: a queued one at once, a running one on its
// node (its view says running until it ends cancelled).
func (c *Client) CancelTask(ctx context.Context, id string) (*AsyncView, error) {
	var v AsyncView
	if err := c.do(ctx, http.MethodDelete, "/api/v1/tasks/"+url.PathEscape(id), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
