package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

// FuzzTaskAnswerAsEncodingJSON: the answer of a task, written by
// jsonSerializer, is what echo's encoding/json writer writes, headers and
// body, byte for byte; and with ?pretty (indented), encoding/json's own.
func FuzzTaskAnswerAsEncodingJSON(f *testing.F) {
	f.Add("t-1", "completed", "hello <b>&</b> \u2028 \xff \x00\"\\", "node-1", int64(12), int64(3), int64(4), true, false)
	f.Add("", "failed", "", "", int64(-1), int64(0), int64(0), false, true)
	f.Fuzz(func(t *testing.T, id, status, result, node string, ms, prompt, completion int64, withNode, withUsage bool) {
		r := taskResult{TaskID: id, Status: status, Result: result, ProcessingTimeMs: ms}
		if withNode {
			r.NodeID = &node
		}
		if withUsage {
			r.Usage = &usageJSON{prompt, completion, prompt + completion}
		}
		for _, target := range []string{"/api/v1/request", "/api/v1/request?pretty"} {
			got := answer(t, jsonSerializer{}, target, r)
			want := answer(t, echo.DefaultJSONSerializer{}, target, r)
			if got.Code != want.Code || got.Body.String() != want.Body.String() ||
				got.Header().Get(echo.HeaderContentType) != want.Header().Get(echo.HeaderContentType) {
				t.Fatalf("%s: wrote %d %q %q; encoding/json: %d %q %q", target,
					got.Code, got.Header().Get(echo.HeaderContentType), got.Body, want.Code, want.Header().Get(echo.HeaderContentType), want.Body)
			}
		}
	})
}

func answer(t *testing.T, s echo.JSONSerializer, target string, r taskResult) *httptest.ResponseRecorder {
	t.Helper()
	e := echo.New()
	e.JSONSerializer = s
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodPost, target, nil), rec)
	if err := c.JSON(http.StatusOK, r); err != nil {
		t.Fatal(err)
	}
	return rec
}
