package server

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	segjson "github.com/segmentio/encoding/json"
)

// The answer to a plain task, the one every request of POST
// /api/v1/request waits for, is written here rather than by c.JSON: echo's
// JSON parses the request's query on every call (for ?pretty) and
// encodes by reflection, about 2 % of the instance's CPU at 2,500
// requests/s in a profile (docs/BENCHMARKS.md). The bytes are
// encoding/json's, HTML-escaped, newline included, as c.JSON writes them
// (FuzzTaskAnswerAsStandard).

// answerBufs holds the buffers answers are built in; one larger than
// maxPooledAnswer (a large result) is left to the collector.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledAnswer = 64 << 10

// writeTaskResult answers c with r. A request with a query string goes
// through c.JSON, which reads ?pretty.
func writeTaskResult(c echo.Context, r taskResult) error {
	if c.QueryString() != "" {
		return c.JSON(http.StatusOK, r)
	}
	c.Response().Header()["Date"] = httpDate.header(time.Now())
	bp := answerBufs.Get().(*[]byte)
	b := appendTaskResult((*bp)[:0], r)
	err := c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
	if cap(b) <= maxPooledAnswer {
		*bp = b
		answerBufs.Put(bp)
	}
	return err
}

// appendTaskResult appends r as encoding/json's Encoder writes it.
func appendTaskResult(b []byte, r taskResult) []byte {
	b = append(b, `{"task_id":`...)
	b = segjson.AppendEscape(b, r.TaskID, segjson.EscapeHTML)
	b = append(b, `,"status":`...)
	b = segjson.AppendEscape(b, r.Status, segjson.EscapeHTML)
	b = append(b, `,"result":`...)
	b = segjson.AppendEscape(b, r.Result, segjson.EscapeHTML)
	b = append(b, `,"node_id":`...)
	if r.NodeID == nil {
		b = append(b, "null"...)
	} else {
		b = segjson.AppendEscape(b, *r.NodeID, segjson.EscapeHTML)
	}
	b = append(b, `,"processing_time_ms":`...)
	b = strconv.AppendInt(b, r.ProcessingTimeMs, 10)
	b = append(b, `,"usage":`...)
	if u := r.Usage; u == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"prompt_tokens":`...)
		b = strconv.AppendInt(b, u.PromptTokens, 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, u.CompletionTokens, 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, u.TotalTokens, 10)
		b = append(b, '}')
	}
	if r.Attempts != 0 {
		b = append(b, `,"attempts":`...)
		b = strconv.AppendInt(b, int64(r.Attempts), 10)
	}
	for i, x := range r.Retries {
		if i == 0 {
			b = append(b, `,"retries":[`...)
		} else {
			b = append(b, ',')
		}
		b = append(b, `{"node_id":`...)
		b = segjson.AppendEscape(b, x.NodeID, segjson.EscapeHTML)
		b = append(b, `,"reason":`...)
		b = segjson.AppendEscape(b, x.Reason, segjson.EscapeHTML)
		b = append(b, `,"lost_ms":`...)
		b = strconv.AppendInt(b, x.LostMs, 10)
		if x.ResumedBytes != 0 {
			b = append(b, `,"resumed_bytes":`...)
			b = strconv.AppendInt(b, x.ResumedBytes, 10)
		}
		b = append(b, '}')
		if i == len(r.Retries)-1 {
			b = append(b, ']')
		}
	}
	return append(b, "}\n"...)
}

// httpDate is the Date header of the current second, shared by every
// answer in it; net/http formats one per response when the handler has not
// set it (about 1 % of the instance's CPU at 2,500 requests/s in a
// profile). The slice is only read: a handler that sets Date replaces it.
var httpDate dateCache

// dateCache holds the Date header of one second.
type dateCache struct{ p atomic.Pointer[secondDate] }

type secondDate struct {
	unix  int64
	value []string
}

// header is the Date header's value for now, as net/http writes it
// (http.TimeFormat), made once a second.
func (c *dateCache) header(now time.Time) []string {
	sec := now.Unix()
	if d := c.p.Load(); d != nil && d.unix == sec {
		return d.value
	}
	d := &secondDate{unix: sec, value: []string{now.UTC().Format(http.TimeFormat)}}
	c.p.Store(d)
	return d.value
}
