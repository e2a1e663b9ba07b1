package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/store"
)

// appendTaskResult writes what encoding/json's Encoder (c.JSON's) writes
// for the same answer, byte for byte, whatever its strings hold.
func FuzzTaskAnswerAsStandard(f *testing.F) {
	f.Add("0b7d8f7e-2c57", "completed", "hello", "node-1", true, int64(12), true, int64(3), int64(4), uint8(0))
	f.Add("", "failed", "<a href=\"x\">&</a>\u2028\u2029", "", false, int64(-1), false, int64(0), int64(0), uint8(1))
	f.Add("t", "completed", "\x00\x1f\b\f\n\r\t\\\"\x7f\xff\xfe é😀", "n\xc3", true, int64(1)<<62, true, int64(-5), int64(1)<<40, uint8(3))
	f.Fuzz(func(t *testing.T, id, status, result, node string, hasNode bool, ms int64, hasUsage bool, p, c int64, retried uint8) {
		r := taskResult{TaskID: id, Status: status, Result: result, ProcessingTimeMs: ms}
		if hasNode {
			r.NodeID = &node
		}
		if hasUsage {
			r.Usage = &usageJSON{p, c, p + c}
		}
		// A retried task's fields, the strings and numbers reused.
		for i := range int(retried % 4) {
			r.Retries = append(r.Retries, store.Retry{NodeID: node, Reason: status, LostMs: ms + int64(i), ResumedBytes: p * int64(i)})
		}
		if len(r.Retries) > 0 {
			r.Attempts = len(r.Retries) + 1
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(r); err != nil {
			t.Fatal(err)
		}
		if got := appendTaskResult(nil, r); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("appendTaskResult:\n got %q\nwant %q", got, want.Bytes())
		}
	})
}

// A plain answer goes out as c.JSON would send it; with a query string it
// is c.JSON's own (which reads ?pretty).
func TestWriteTaskResultAsEchoJSON(t *testing.T) {
	node := "n1"
	r := taskResult{TaskID: "t1", Status: "completed", Result: "<ok>", NodeID: &node, ProcessingTimeMs: 7}
	e := echo.New()
	for _, target := range []string{"/api/v1/request", "/api/v1/request?pretty"} {
		answer := func(write func(echo.Context) error) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			if err := write(e.NewContext(httptest.NewRequest(http.MethodPost, target, nil), rec)); err != nil {
				t.Fatal(err)
			}
			return rec
		}
		got := answer(func(c echo.Context) error { return writeTaskResult(c, r) })
		want := answer(func(c echo.Context) error { return c.JSON(http.StatusOK, r) })
		if target == "/api/v1/request" && got.Header().Get("Date") == "" {
			t.Errorf("%s: no Date header (net/http would format one)", target)
		}
		if got.Code != want.Code || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") || got.Body.String() != want.Body.String() {
			t.Errorf("%s: %d %q %q, want %d %q %q", target, got.Code, got.Header().Get("Content-Type"), got.Body, want.Code, want.Header().Get("Content-Type"), want.Body)
		}
	}
}

// The Date header is made once a second, as net/http would write it.
func TestDateHeaderOncePerSecond(t *testing.T) {
	var dates dateCache
	t0 := time.Date(2026, 12, 6, 17, 4, 5, 0, time.FixedZone("x", 3600))
	first := dates.header(t0)
	if want := []string{"Sun, 06 Dec 2026 16:04:05 GMT"}; len(first) != 1 || first[0] != want[0] {
		t.Fatalf("header(%v) = %q, want %q", t0, first, want)
	}
	if again := dates.header(t0.Add(999 * time.Millisecond)); &again[0] != &first[0] {
		t.Errorf("the same second made its header again")
	}
	if next := dates.header(t0.Add(time.Second)); next[0] != "Sun, 06 Dec 2026 16:04:06 GMT" {
		t.Errorf("the next second: %q", next)
	}
}

// BenchmarkTaskAnswer is the plain answer written by writeTaskResult
// against c.JSON, each through an echo context on a recorder.
func BenchmarkTaskAnswer(b *testing.B) {
	node := "node-3f2a"
	r := taskResult{TaskID: "0b7d8f7e-2c57-4d4b-8f3c-0e6a2b8e9d11", Status: "completed", Result: "hello, this is the node's answer", NodeID: &node, ProcessingTimeMs: 3}
	e := echo.New()
	req := httptest.NewRequest(http.MethodPost, "/api/v1/request", nil)
	for _, v := range []struct {
		name  string
		write func(echo.Context) error
	}{{"writeTaskResult", func(c echo.Context) error { return writeTaskResult(c, r) }},
		{"echo.JSON", func(c echo.Context) error { return c.JSON(http.StatusOK, r) }}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			rec := httptest.NewRecorder()
			c := e.NewContext(req, rec)
			for b.Loop() {
				rec.Body.Reset()
				c.Reset(req, rec)
				if err := v.write(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
