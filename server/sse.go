package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/tasks"
)

// sseWriter writes GemmaNet's event stream: each event is one
// "data: <json>" line and a blank line; no event: lines, no [DONE]. A
// resumable stream (taskstream.go) puts an "id: <seq>" line first.
type sseWriter struct {
	w       *echo.Response
	started bool
	buf     bytes.Buffer
}

func newSSE(w *echo.Response) *sseWriter { return &sseWriter{w: w} }

// start sends the headers, once.
func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events through at once
	s.w.WriteHeader(http.StatusOK)
	s.w.Flush()
}

// send writes one event and flushes it. An error means the client is gone.
func (s *sseWriter) send(v any) error { return s.sendID(0, v) }

// sendID writes one event with its id (none when id is 0) and flushes it.
func (s *sseWriter) sendID(id int64, v any) error {
	s.start()
	s.buf.Reset()
	if id > 0 {
		s.buf.WriteString("id: ")
		s.buf.WriteString(strconv.FormatInt(id, 10))
		s.buf.WriteByte('\n')
	}
	s.buf.WriteString("data: ")
	enc := json.NewEncoder(&s.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends the line with \n
		return err
	}
	s.buf.WriteByte('\n')
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return errClientGone
	}
	s.w.Flush()
	return nil
}

// comment writes a comment line (a keep-alive, which clients ignore).
func (s *sseWriter) comment(text string) error {
	s.start()
	if _, err := s.w.Write([]byte(": " + text + "\n\n")); err != nil {
		return errClientGone
	}
	s.w.Flush()
	return nil
}

// streamWriter is how one API writes a streaming task: GemmaNet's events on
// /api/v1/request, OpenAI's chunks on /v1/chat/completions. streamTask is
// the part they share.
type streamWriter interface {
	// begin starts the stream: a node has the task. An error means the
	// client is gone.
	begin() error
	delta(d string) error
	// fail ends a started stream with an error event.
	fail(code tasks.Code, message string)
	// done ends a stream that completed.
	done(out tasks.Outcome)
	// httpError is the plain error answer of a task that failed before the
	// stream started ("no node" stays an HTTP status).
	httpError(err error) error
}

// runTask runs req on one node, or split over several when it is long
// enough and of a split type (see split.go in tasks). A split task does not
// stream chunk by chunk: its hooks hear only that it was assigned.
func (a *App) runTask(c echo.Context, req tasks.Request, h tasks.Hooks) (tasks.Outcome, error) {
	return a.runAdmitted(c, req, h, a.shouldSplit(req.TaskType, req.Content))
}

// runWhole runs req on one node, never split (an embedding: its inputs
// are one answer).
func (a *App) runWhole(c echo.Context, req tasks.Request, h tasks.Hooks) (tasks.Outcome, error) {
	return a.runAdmitted(c, req, h, false)
}

// runAdmitted runs req once its key's token and budget limits admit it
// (quota.go): a refusal is the error, an *apiError (taskError passes it
// on). Its hold is settled by its end, or given back here.
func (a *App) runAdmitted(c echo.Context, req tasks.Request, h tasks.Hooks, split bool) (tasks.Outcome, error) {
	release, err := a.admitRequest(c, req, split)
	if err != nil {
		return tasks.Outcome{}, err
	}
	defer release()
	if split {
		return a.engine.RunSplit(c.Request().Context(), req, h)
	}
	return a.engine.RunTask(c.Request().Context(), req, h)
}

// streamTask runs a streaming task: the stream begins when a node has the
// task, each delta follows, and it ends with done or an error event. A
// handler that answered all at once (or a split task) sends its whole
// result as one delta.
func (a *App) streamTask(c echo.Context, req tasks.Request, sse *sseWriter, w streamWriter) error {
	out, err := a.runTask(c, req, tasks.Hooks{
		// A failed write here means the client is gone; the next delta's
		// write fails too and cancels the task.
		Assigned: func() { _ = w.begin() },
		Chunk:    w.delta,
	})
	if err != nil {
		if !sse.started {
			return w.httpError(err)
		}
		if e := tasks.AsError(err); e.Code != tasks.CodeCanceled { // else nobody is listening
			w.fail(e.Code, e.Message)
		}
		return nil
	}
	if !sse.started { // Assigned always comes first; this is a safety net
		if err := w.begin(); err != nil {
			return nil
		}
	}
	if out.Status != tasks.StatusCompleted {
		msg := out.Result
		if msg == "" {
			msg = "Task failed"
		}
		// GemmaNet's code for a failure in a stream, on both APIs.
		w.fail(tasks.CodeTaskFailed, msg)
		return nil
	}
	if !out.Streamed && out.Result != "" {
		if err := w.delta(out.Result); err != nil {
			return nil
		}
	}
	w.done(out)
	return nil
}
