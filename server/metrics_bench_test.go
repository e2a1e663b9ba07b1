package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The middleware counts each request under its route and status, once,
// and times it under its route.
func TestHTTPMetricsCountsByRouteAndStatus(t *testing.T) {
	m := newHTTPMetrics(prometheus.NewRegistry())
	e := echo.New()
	h := m.middleware(func(c echo.Context) error { return c.NoContent(c.Get("want").(int)) })
	for _, code := range []int{200, 200, 404, 200} {
		c := e.NewContext(httptest.NewRequest(http.MethodGet, "/api/v1/x", nil), httptest.NewRecorder())
		c.SetPath("/api/v1/x")
		c.Set("want", code)
		_ = h(c)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("/api/v1/x", "200")); got != 3 {
		t.Errorf("200s counted %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("/api/v1/x", "404")); got != 1 {
		t.Errorf("404s counted %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.duration); n != 1 {
		t.Errorf("%d duration series, want 1 (by route only)", n)
	}
}

// BenchmarkHTTPMetrics is what counting one request costs the middleware.
func BenchmarkHTTPMetrics(b *testing.B) {
	m := newHTTPMetrics(prometheus.NewRegistry())
	e := echo.New()
	h := m.middleware(func(c echo.Context) error { c.Response().Status = 200; return nil })
	c := e.NewContext(httptest.NewRequest(http.MethodPost, "/api/v1/request", nil), httptest.NewRecorder())
	c.SetPath("/api/v1/request")
	b.ReportAllocs()
	for b.Loop() {
		_ = h(c)
	}
}
