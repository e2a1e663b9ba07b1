package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"
)

// sseWriter writes GemmaNet's event stream: each event is one
// "data: <json>" line and a blank line; no event: lines, no [DONE].
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
func (s *sseWriter) send(v any) error {
	s.start()
	s.buf.Reset()
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
