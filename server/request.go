package server

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"switchyard/store"
	"switchyard/tasks"
)

const ctxTaskBody = "switchyard.task_body"

// readTaskBody reads and validates a POST /api/v1/request body before
// authentication, because the key may be in the body (deprecated).
func (a *App) readTaskBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := readBody(c)
		if err != nil {
			return err
		}
		body, err := parseTaskBody(b)
		if err != nil {
			return newError(http.StatusUnprocessableEntity, "invalid_request", trimKind(err))
		}
		c.Set(ctxTaskBody, &body)
		return next(c)
	}
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
}

type usageJSON struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func resultJSON(out tasks.Outcome) taskResult {
	r := taskResult{TaskID: out.TaskID, Status: out.Status, Result: out.Result, NodeID: &out.NodeID, ProcessingTimeMs: out.ProcessingMs}
	if out.Usage != nil {
		r.Usage = &usageJSON{out.Usage.PromptTokens, out.Usage.CompletionTokens, out.Usage.PromptTokens + out.Usage.CompletionTokens}
	}
	return r
}

// request is POST /api/v1/request, plain or streaming.
func (a *App) request(c echo.Context) error {
	if a.draining.Load() {
		return &apiError{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: "this instance is draining; retry on another", RetryAfter: "1"}
	}
	body := c.Get(ctxTaskBody).(*taskBody)
	trust := body.Trust
	if strings.EqualFold(c.Request().Header.Get("X-GemmaNet-Trust"), "official") {
		trust = "official" // the stricter of body and header wins
	}
	req := tasks.Request{
		TaskID: uuid.NewString(), AccountID: accountOf(c).ID, TaskType: body.TaskType,
		Content: body.Content, Params: body.Params, Stream: body.Stream, Trust: trust,
	}
	if a.shouldSplit(req.TaskType, req.Content) {
		return a.split(c, req)
	}
	if body.Stream {
		return a.stream(c, req)
	}
	out, err := a.disp.Run(c.Request().Context(), req, tasks.Hooks{})
	if err != nil {
		return taskError(err)
	}
	return c.JSON(http.StatusOK, resultJSON(out))
}

// splitThreshold is the content length (characters) over which a task of a
// split type is split (GemmaNet's).
const splitThreshold = 1000

// shouldSplit reports whether a task is split across nodes.
func (a *App) shouldSplit(taskType, content string) bool {
	return slices.Contains(a.cfg.SplitTaskTypes, taskType) && utf8.RuneCountInString(content) > splitThreshold
}

// split runs a task in parts on several nodes. A streaming client gets the
// joined result as one delta, then done (as GemmaNet does): the parts are
// not streamed chunk by chunk.
func (a *App) split(c echo.Context, req tasks.Request) error {
	sse := newSSE(c.Response())
	var hooks tasks.Hooks
	if req.Stream {
		hooks.Assigned = sse.start
	}
	out, err := a.disp.RunSplit(c.Request().Context(), req, hooks)
	if !req.Stream {
		if err != nil {
			return taskError(err)
		}
		res := resultJSON(out)
		res.NodeID = nil // several nodes served it
		return c.JSON(http.StatusOK, res)
	}
	switch {
	case err != nil && !sse.started:
		return taskError(err)
	case err != nil:
		if e := tasks.AsError(err); e.Code != tasks.CodeCanceled {
			_ = sse.send(errorEvent{Error: errorDetail{Code: e.Code, Message: e.Message}, TaskID: req.TaskID})
		}
	case out.Status != store.StatusCompleted:
		_ = sse.send(errorEvent{Error: errorDetail{Code: tasks.CodeTaskFailed, Message: out.Result}, TaskID: req.TaskID})
	default:
		res := resultJSON(out)
		res.NodeID = nil
		if sse.send(deltaEvent{Delta: out.Result}) == nil {
			_ = sse.send(doneEvent{Done: true, Result: res})
		}
	}
	return nil
}

// stream runs a streaming task as server-sent events. The response starts
// when a node has the task; "no node" is still a plain HTTP error.
func (a *App) stream(c echo.Context, req tasks.Request) error {
	sse := newSSE(c.Response())
	out, err := a.disp.Run(c.Request().Context(), req, tasks.Hooks{
		Assigned: sse.start,
		Chunk:    func(delta string) error { return sse.send(deltaEvent{Delta: delta}) },
	})
	if err != nil {
		if !sse.started {
			return taskError(err)
		}
		e := tasks.AsError(err)
		if e.Code == tasks.CodeCanceled {
			return nil // nobody is listening
		}
		_ = sse.send(errorEvent{Error: errorDetail{Code: e.Code, Message: e.Message}, TaskID: req.TaskID})
		return nil
	}
	sse.start()
	if out.Status != store.StatusCompleted {
		msg := out.Result
		if msg == "" {
			msg = "Task failed"
		}
		_ = sse.send(errorEvent{Error: errorDetail{Code: tasks.CodeTaskFailed, Message: msg}, TaskID: req.TaskID})
		return nil
	}
	if !out.Streamed && out.Result != "" {
		// The handler returned its whole answer at once.
		if err := sse.send(deltaEvent{Delta: out.Result}); err != nil {
			return nil
		}
	}
	_ = sse.send(doneEvent{Done: true, Result: resultJSON(out)})
	return nil
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
