package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	asyncq "github.com/switchyard-dev/switchyard/async"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/streamlog"
)

// Resumable streams: GET /api/v1/tasks/{id}/stream replays and
// follows a task's chunk log (package streamlog) as server-sent events,
// each with its seq as the event id, so that a client cut off reconnects
// with Last-Event-ID and gets exactly what it missed, on any instance.
//
// buildPump sets the log (a.streams: memory alone, Redis in a cluster;
// closeAll closes it) and the authoriser (authorizeAsyncStream) before the
// routes are built; the async pump feeds the log: MarkStreamed then Append
// for each chunk of a task submitted with "stream": true, End with the
// task's final view (async.Pump.endStream). routeTaskStream adds the route
// only when both are set.

// TaskAuthorizer says whether accountID's key keyID may read taskID's
// stream (keyID "": any key of the account may, readsKey): nil, or an
// error wrapping ErrTaskNotFound (an unknown task, or another account's or
// key's: all 404, so that ids cannot be probed) or ErrNoStream (a task of
// this account without a stream, or whose chunks have expired). Any other
// error is a 503.
type TaskAuthorizer func(ctx context.Context, taskID, accountID, keyID string) error

var (
	// ErrTaskNotFound is a TaskAuthorizer's answer for a task the caller
	// may not see.
	ErrTaskNotFound = errors.New("task not found")
	// ErrNoStream is a TaskAuthorizer's answer for a task with nothing to
	// stream.
	ErrNoStream = errors.New("the task has no stream")
)

// defaultKeepAlive is how often an idle task stream gets a comment line,
// so that proxies with an idle timeout (60 s is common) keep it open.
const defaultKeepAlive = 15 * time.Second

// newStreamLog is the chunk log of the mode (the modes in docs/OPERATIONS.md): shared in Redis
// in multi-instance mode, in memory otherwise.
func (a *App) newStreamLog() streamlog.Log {
	if a.cfg.Multi() {
		return streamlog.NewRedis(a.cluster.conn.Client(), a.cfg.Namespace, streamlog.Config{})
	}
	return streamlog.NewMemory(streamlog.Config{})
}

// routeTaskStream adds GET (and HEAD) /api/v1/tasks/{id}/stream to v1 when
// the App has a log and an authoriser.
func (a *App) routeTaskStream(v1 routes, m ...echo.MiddlewareFunc) {
	if a.streams == nil || a.authorizeTask == nil {
		return
	}
	get(v1, "/tasks/:id/stream", a.taskStream, m...)
}

// taskDone ends a resumable stream, as done ends /api/v1/request's (its
// chunks are the same delta events).
type taskDone struct {
	Done   bool            `json:"done"`
	Result json.RawMessage `json:"result"` // the task's final JSON, as the async side gave it
}

// taskStream is GET /api/v1/tasks/{id}/stream. It only reads: a client
// that goes away cancels nothing.
func (a *App) taskStream(c echo.Context) error {
	id := c.Param("id")
	r := c.Request()
	after, err := lastEventID(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("last_event_id"))
	if err != nil {
		return newError(http.StatusBadRequest, CodeInvalidLastEventID, err.Error())
	}
	switch err := a.authorizeTask(r.Context(), id, accountOf(c).ID, readsKey(accountOf(c))); {
	case errors.Is(err, ErrTaskNotFound):
		return newError(http.StatusNotFound, CodeTaskNotFound, "no such task")
	case errors.Is(err, ErrNoStream):
		return newError(http.StatusNotFound, CodeStreamNotFound, "the task has no stream (it was not submitted with \"stream\": true, or its chunks have expired)")
	case err != nil:
		a.log.Warn("cannot authorise a task stream", "task_id", id, "err", err)
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the task cannot be looked up; retry", RetryAfter: "1"}
	}
	if after > 0 {
		end, err := a.streams.Ended(r.Context(), id)
		if err != nil {
			a.log.Warn("cannot read a task stream", "task_id", id, "err", err)
			return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "the stream cannot be read; retry", RetryAfter: "1"}
		}
		if end > 0 && after >= end {
			// Nothing was missed. 204 tells an EventSource to stop
			// reconnecting.
			return c.NoContent(http.StatusNoContent)
		}
	}
	// The headers go at once: a client must not wait for the first chunk
	// (which may be long in coming) to know that its stream is open.
	sse := newSSE(c.Response())
	sse.start()
	if r.Method == http.MethodHead {
		return nil
	}

	a.streamsOpen.Add(1)
	defer a.streamsOpen.Add(-1)
	// The stream ends with the request, or when the server begins to shut
	// down (the client then reconnects elsewhere with Last-Event-ID).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(a.streamsStop, cancel)
	defer stop()

	entries := make(chan streamlog.Entry)
	done := make(chan error, 1)
	go func() { // the reader; waited for below, after cancel
		done <- a.streams.Read(ctx, id, after, func(e streamlog.Entry) error {
			select {
			case entries <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	defer func() { cancel(); <-done }()

	tick := time.NewTicker(a.keepAlive)
	defer tick.Stop()
	for {
		select {
		case e := <-entries:
			if e.End {
				_ = sse.sendID(e.Seq, taskDone{Done: true, Result: e.Final})
				return nil
			}
			if err := sse.sendID(e.Seq, deltaEvent{Delta: e.Data}); err != nil {
				return nil
			}
			tick.Reset(a.keepAlive)
		case <-tick.C:
			if err := sse.comment("keep-alive"); err != nil {
				return nil
			}
		case err := <-done:
			done <- err // for the deferred wait
			if err == nil || ctx.Err() != nil {
				// nil: it ended at or before Last-Event-ID just now (the
				// check above saw it open).
				return nil
			}
			a.log.Warn("task stream broken", "task_id", id, "err", err)
			// Retryable, unlike every other error event: the client
			// reconnects with the last id it saw.
			_ = sse.send(errorEvent{Error: errorDetail{Code: CodeStreamUnavailable, Message: "the stream cannot be read now; reconnect with Last-Event-ID"}, TaskID: id})
			return nil
		}
	}
}

// maxEventIDDigits bounds a Last-Event-ID: seqs are far below 10^18.
const maxEventIDDigits = 18

// lastEventID reads the seq a client saw last, from the Last-Event-ID
// header or else the last_event_id query parameter (for clients that
// cannot set headers): empty is 0 (from the start); otherwise a decimal
// number of at most 18 digits, with surrounding spaces allowed.
func lastEventID(header, query string) (int64, error) {
	v := header
	if strings.TrimSpace(v) == "" {
		v = query
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	if len(v) > maxEventIDDigits || strings.Trim(v, "0123456789") != "" {
		return 0, errors.New("Last-Event-ID must be the id of an event of this stream (a decimal number)")
	}
	return strconv.ParseInt(v, 10, 64)
}

// authorizeAsyncStream is the TaskAuthorizer of async tasks: the caller's
// own task, submitted with stream: true, whose chunks are still kept (a
// final task whose log has expired has nothing left to read: its result
// is in GET /api/v1/tasks/{id}).
func (a *App) authorizeAsyncStream(ctx context.Context, taskID, accountID, keyID string) error {
	t, err := a.store.AsyncTask(ctx, taskID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ErrTaskNotFound
	case err != nil:
		return err
	case t.AccountID != accountID, keyID != "" && t.KeyID != keyID:
		return ErrTaskNotFound
	case !t.Stream:
		return ErrNoStream
	case asyncq.Final(t.Status):
		end, err := a.streams.Ended(ctx, taskID)
		if err != nil {
			return err
		}
		if end == 0 {
			return ErrNoStream
		}
	}
	return nil
}
