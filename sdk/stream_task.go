package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// TaskOutcome is the final state of an async task, as its stream's result
// event (and GET /api/v1/tasks/{id}) gives it. Raw is the whole JSON, for
// the fields this type does not name.
type TaskOutcome struct {
	TaskID           string          `json:"task_id"`
	Status           string          `json:"status"` // completed, failed or cancelled
	Result           *string         `json:"result"`
	NodeID           *string         `json:"node_id"`
	Error            *ErrorPayload   `json:"error"`
	ProcessingTimeMs int64           `json:"processing_time_ms"`
	Usage            *Usage          `json:"usage"`
	Raw              json.RawMessage `json:"-"`
}

// The reconnect delay of StreamTask: doubled from 100 ms to 5 s after each
// failed attempt (jittered, see backoff), reset by each event received.
const (
	streamRetryMin = 100 * time.Millisecond
	streamRetryMax = 5 * time.Second
)

// codeStreamUnavailable is the server's error event for a stream it could
// not read on: the one error event after which a client reconnects.
const codeStreamUnavailable = "stream_unavailable"

// errStreamCut is a stream that ended without its result: reconnect.
var errStreamCut = errors.New("sdk: the task stream was cut")

// StreamTask follows the stream of an async task submitted with "stream":
// true (GET /api/v1/tasks/{id}/stream): it calls onChunk (if not nil) with
// each chunk in order and returns the task's outcome when the result event
// comes. When the connection is cut, the server ends the stream early (it
// drains) or answers 429 or 5xx, it reconnects with Last-Event-ID set to
// the last event it received whole, after a backoff (100 ms doubling to
// 5 s, reset by each event), so no chunk is missed or repeated. It stops
// when ctx ends, when onChunk fails (its error), or on any other answer
// (an *APIError: 404 task_not_found or stream_not_found, 401, …).
func (c *Client) StreamTask(ctx context.Context, taskID string, onChunk func(chunk string) error) (*TaskOutcome, error) {
	b := newBackoff(streamRetryMin, streamRetryMax)
	lastID := ""
	for {
		out, err := c.streamTaskOnce(ctx, taskID, &lastID, b, onChunk)
		var oc onChunkError
		if errors.As(err, &oc) {
			return nil, oc.err
		}
		if out != nil || !retryable(err) {
			return out, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		t := time.NewTimer(b.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// onChunkError is onChunk's error, which ends StreamTask as it is.
type onChunkError struct{ err error }

func (e onChunkError) Error() string { return e.err.Error() }
func (e onChunkError) Unwrap() error { return e.err }

// retryable reports whether StreamTask should reconnect after err.
func retryable(err error) bool {
	var ae *APIError
	var oc onChunkError
	switch {
	case errors.As(err, &oc):
		return false
	case errors.Is(err, errStreamCut):
		return true
	case errors.As(err, &ae):
		return ae.Status == http.StatusTooManyRequests || ae.Status >= 500 || ae.Code == codeStreamUnavailable
	}
	// Transport errors (refused, reset, timed out); not the caller's ctx.
	return err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// streamTaskOnce reads one connection's events, advancing *lastID past
// each whole event.
func (c *Client) streamTaskOnce(ctx context.Context, taskID string, lastID *string, b *backoff, onChunk func(string) error) (*TaskOutcome, error) {
	path := "/api/v1/tasks/" + url.PathEscape(taskID) + "/stream"
	req, err := c.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *lastID != "" {
		req.Header.Set("Last-Event-ID", *lastID)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sdk: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		// Nothing after lastID: the result was before it, which a reader
		// that returns on the result never asks for.
		return nil, fmt.Errorf("sdk: GET %s: 204: the stream ended at or before event %q", path, *lastID)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, parseAPIError(resp)
	}
	events := newSSEReader(resp.Body)
	for {
		ev, err := events.event()
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errStreamCut
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: %v", errStreamCut, err)
		}
		if len(ev.data) > 0 {
			var se streamEvent
			var raw struct {
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(ev.data, &se); err != nil {
				return nil, fmt.Errorf("sdk: malformed stream event: %w", err)
			}
			switch {
			case se.Error != nil:
				return nil, &APIError{Status: resp.StatusCode, Code: se.Error.Code, Message: se.Error.Message, TaskID: se.TaskID}
			case se.Done:
				var out TaskOutcome
				if err := json.Unmarshal(ev.data, &raw); err != nil || len(raw.Result) == 0 || json.Unmarshal(raw.Result, &out) != nil {
					return nil, errors.New("sdk: stream done event without a task result")
				}
				out.Raw = raw.Result
				return &out, nil
			case se.Delta != nil && onChunk != nil:
				if err := onChunk(*se.Delta); err != nil {
					return nil, onChunkError{err}
				}
			}
		}
		if ev.hasID {
			*lastID = ev.id
		}
		b.reset()
	}
}
