package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

// BenchmarkRouterEchoVsServeMux is what echo v4 (a core dependency) costs a
// request against net/http's own ServeMux: one POST /api/v1/request among
// routes of the App's shape (routes.go), through two router-wide and five
// route middlewares (as the request route has), its body read and a small
// JSON answer written. The handlers and middlewares do nothing else, so
// the difference is the router, its context and its JSON writer; the
// handler alone, called without a router, is the baseline both include.
func BenchmarkRouterEchoVsServeMux(b *testing.B) {
	paths := []string{"/livez", "/api/health", "/metrics", "/api/v1/rate", "/api/v1/tasks", "/api/v1/account",
		"/api/v1/usage", "/api/v1/status", "/api/v1/nodes", "/api/v1/capabilities", "/api/v1/leaderboard",
		"/api/v1/register", "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"}
	type answer struct {
		TaskID string `json:"task_id"`
		Status string `json:"status"`
		Result string `json:"result"`
	}
	ans := answer{TaskID: "0b7d8f7e-2c57-4d4b-8f3c-0e6a2b8e9d11", Status: "completed", Result: "hello"}

	e := echo.New()
	pass := func(next echo.HandlerFunc) echo.HandlerFunc { return func(c echo.Context) error { return next(c) } }
	e.Use(pass, pass)
	handle := func(c echo.Context) error {
		if _, err := io.Copy(io.Discard, c.Request().Body); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, ans)
	}
	for _, p := range paths {
		e.POST(p, handle)
	}
	e.POST("/api/v1/request", handle, pass, pass, pass, pass, pass)
	e.GET("/api/v1/tasks/:id", handle)

	mux := http.NewServeMux()
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { next.ServeHTTP(w, r) })
	}
	handleStd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(ans)
	})
	for _, p := range paths {
		mux.Handle("POST "+p, handleStd)
	}
	var chain http.Handler = handleStd
	for range 7 { // the five route middlewares and the two router-wide ones
		chain = wrap(chain)
	}
	mux.Handle("POST /api/v1/request", chain)
	mux.Handle("GET /api/v1/tasks/{id}", handleStd)

	body := []byte(`{"task_type":"echo","content":"hello"}`)
	for _, r := range []struct {
		name string
		h    http.Handler
	}{{"echo", e}, {"ServeMux", mux}, {"handler-alone", handleStd}} {
		b.Run(r.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/api/v1/request", bytes.NewReader(body))
				rec := httptest.NewRecorder()
				r.h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", r.name, rec.Code, rec.Body)
				}
			}
		})
	}
}
