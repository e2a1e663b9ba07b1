package sdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// APIError is an error answer of the HTTP API, or an error event in a
// stream that had already started (then Status is the stream's 200).
type APIError struct {
	Status  int    // HTTP status
	Code    string // machine-readable code (timeout, node_disconnected, …); "" if the server sent none
	Message string
	// RetryAfter is the server's Retry-After (429, 503), or 0.
	RetryAfter time.Duration
	// TaskID is the task an error event in a stream was about, or "".
	TaskID string
}

func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = strings.ToLower(http.StatusText(e.Status))
	}
	if e.TaskID != "" {
		return fmt.Sprintf("sdk: task %s failed (%d %s): %s", e.TaskID, e.Status, code, e.Message)
	}
	return fmt.Sprintf("sdk: HTTP %d %s: %s", e.Status, code, e.Message)
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// parseAPIError reads an error answer. It understands switchyard's
// {"error":{"code","message"},"detail":"…"}, GemmaNet's {"detail":"…"} (also
// FastAPI's list form) and the OpenAI form {"error":{"message","type","code"}};
// anything else becomes the body's text.
func parseAPIError(resp *http.Response) *APIError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var b struct {
		Error  json.RawMessage `json:"error"`
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &b) == nil {
		var obj ErrorPayload
		var str string
		switch {
		case json.Unmarshal(b.Error, &obj) == nil:
			e.Code, e.Message = obj.Code, obj.Message
		case json.Unmarshal(b.Error, &str) == nil:
			e.Message = str
		}
		if e.Message == "" && len(b.Detail) > 0 {
			if json.Unmarshal(b.Detail, &str) == nil {
				e.Message = str
			} else {
				e.Message = string(b.Detail)
			}
		}
	}
	if e.Message == "" {
		e.Message = string(bytes.TrimSpace(body))
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// parseRetryAfter reads Retry-After as seconds or as an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		return time.Duration(max(s, 0)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
