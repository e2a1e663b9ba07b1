package server

import (
	"bytes"
	"errors"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	segjson "github.com/segmentio/encoding/json"

	"github.com/switchyard-dev/switchyard/sdk/wire"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"
)

// Context keys of the task routes' middleware.
const (
	ctxTaskBody  = "switchyard.task_body"
	ctxBodyKey   = "switchyard.body_key"   // the deprecated body field api_key (keyFromBody)
	ctxBodyBytes = "switchyard.body_bytes" // the body, when keyFromBody read it
)

// keyFromBody finds the API key of a request that sent no Authorization
// header in GemmaNet's deprecated body field api_key (POST
// /api/v1/request; POST /api/v1/tasks too), for requireAccount, which
// comes next. Invariant 16: a stranger costs no more than its headers. A
// request with a header has its body read only once its key is known good;
// one without has it read (within --max-body-bytes) and looked at for that
// field alone, in bounds (wire.CheckBounds) and without decoding the rest:
// a body without a valid key is never decoded.
func (a *App) keyFromBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if bearer(c.Request()) != "" {
			return next(c)
		}
		b, err := readBody(c)
		if err != nil {
			return err
		}
		c.Set(ctxBodyBytes, b)
		var field struct {
			APIKey *string `json:"api_key"`
		}
		// Any other field is stepped over, allocating nothing; a body
		// that is not an object, or not JSON, has no key (401).
		b = bytes.TrimSpace(b)
		if len(b) > 0 && b[0] == '{' && wire.CheckBounds(b) == nil && segjson.Unmarshal(b, &field) == nil && field.APIKey != nil {
			c.Set(ctxBodyKey, *field.APIKey)
		}
		return next(c)
	}
}

// readTaskBody reads and validates a POST /api/v1/request body, once
// requireAccount has accepted its key.
func (a *App) readTaskBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := taskBodyBytes(c)
		if err != nil {
			return err
		}
		body, err := parseTaskBody(b)
		if err != nil {
			return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, trimKind(err))
		}
		c.Set(ctxTaskBody, &body)
		return next(c)
	}
}

// taskBodyBytes is the request's body: as keyFromBody (or an earlier
// call) read it, or read now and kept for the next reader (idempotent).
func taskBodyBytes(c echo.Context) ([]byte, error) {
	if b, ok := c.Get(ctxBodyBytes).([]byte); ok {
		return b, nil
	}
	b, err := readBody(c)
	if err == nil {
		c.Set(ctxBodyBytes, b)
	}
	return b, err
}

// trimKind drops the "invalid request body: " prefix a client does not need.
func trimKind(err error) string {
	return strings.TrimPrefix(err.Error(), errInvalidBody.Error()+": ")
}

// taskResult is the answer to a task (GemmaNet's TaskResult).
type taskResult struct {
	TaskID           string     `json:"task_id"`
	Status           string     `json:"status"`
	Result           string     `json:"result"`
	NodeID           *string    `json:"node_id"` // null for a split task (several nodes)
	ProcessingTimeMs int64      `json:"processing_time_ms"`
	Usage            *usageJSON `json:"usage"`
	// Ours, for a task run again after its node failed it: how many nodes
	// were handed it, and why each before the last was not its answer.
	// Absent when its first node answered.
	Attempts int           `json:"attempts,omitempty"`
	Retries  []store.Retry `json:"retries,omitempty"`
}

type usageJSON struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func resultJSON(out tasks.Outcome) taskResult {
	r := taskResult{TaskID: out.TaskID, Status: string(out.Status), Result: out.Result, ProcessingTimeMs: out.ProcessingMs}
	if out.NodeID != "" { // a split task has none: several nodes served it
		r.NodeID = &out.NodeID
	}
	if out.Usage != nil {
		r.Usage = &usageJSON{out.Usage.PromptTokens, out.Usage.CompletionTokens, out.Usage.PromptTokens + out.Usage.CompletionTokens}
	}
	if len(out.Retries) > 0 {
		r.Attempts, r.Retries = out.Attempts, out.Retries
	}
	return r
}

// request is POST /api/v1/request, plain or streaming.
func (a *App) request(c echo.Context) error {
	if a.draining.Load() {
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeNotReady, Message: "this instance is draining; retry on another", RetryAfter: "1"}
	}
	body := c.Get(ctxTaskBody).(*taskBody)
	trust := body.Trust
	if strings.EqualFold(c.Request().Header.Get("X-GemmaNet-Trust"), "official") {
		trust = "official" // the stricter of body and header wins
	}
	labels, err := nodeLabels(c, body.NodeLabels)
	if err != nil {
		return err
	}
	if err := checkSessionID(c); err != nil {
		return err
	}
	retries, err := retriesOf(c, body.Retries)
	if err != nil {
		return err
	}
	req := tasks.Request{
		TaskID: uuid.NewString(), AccountID: accountOf(c).ID, KeyID: accountOf(c).KeyID, Session: sessionOf(c, ""), TaskType: body.TaskType,
		Content: body.Content, Params: body.Params, Stream: body.Stream, Trust: trust, Labels: labels, Priority: body.Priority,
		Retries: retries,
	}
	if body.Stream {
		sse := newSSE(c.Response())
		return a.streamTask(c, req, sse, gemmaStream{sse: sse, taskID: req.TaskID})
	}
	out, err := a.runTask(c, req, tasks.Hooks{})
	if err != nil {
		return taskError(err)
	}
	setServerTiming(c, out)
	return writeTaskResult(c, resultJSON(out))
}

// splitThreshold is the content length (characters) over which a task of a
// split type is split (GemmaNet's).
const splitThreshold = 1000

// shouldSplit reports whether a task is split across nodes. A streaming
// client of a split task gets the joined result as one delta, then done (as
// GemmaNet does): the parts are not streamed chunk by chunk.
func (a *App) shouldSplit(taskType, content string) bool {
	return slices.Contains(a.cfg.SplitTaskTypes, taskType) && utf8.RuneCountInString(content) > splitThreshold
}

// gemmaStream writes GemmaNet's events: headers when a node has the task,
// {"delta"} per chunk, then {"done","result"} or {"error","task_id"}.
type gemmaStream struct {
	sse    *sseWriter
	taskID string
}

func (g gemmaStream) begin() error              { g.sse.start(); return nil }
func (g gemmaStream) delta(d string) error      { return g.sse.send(deltaEvent{Delta: d}) }
func (g gemmaStream) httpError(err error) error { return taskError(err) }
func (g gemmaStream) done(out tasks.Outcome) {
	_ = g.sse.send(doneEvent{Done: true, Result: resultJSON(out)})
}
func (g gemmaStream) fail(code tasks.Code, message string) {
	_ = g.sse.send(errorEvent{Error: errorDetail{Code: Code(code), Message: message}, TaskID: g.taskID})
}

type deltaEvent struct {
	Delta string `json:"delta"`
}

type doneEvent struct {
	Done   bool       `json:"done"`
	Result taskResult `json:"result"`
}

type errorEvent struct {
	Error  errorDetail `json:"error"`
	TaskID string      `json:"task_id"`
}

var errClientGone = errors.New("the client went away")
