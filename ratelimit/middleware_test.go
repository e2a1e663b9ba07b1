package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-dev/switchyard/ratelimit"
)

// serve builds an echo server with one GET / route behind mw.
func serve(mw echo.MiddlewareFunc) *echo.Echo {
	e := echo.New()
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") }, mw)
	return e
}

// get sends GET / from the given client address.
func get(e *echo.Echo, remoteIP string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = remoteIP + ":40000"
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

type wantHeaders struct {
	status                         int
	limit, remaining, reset, retry string // "" means absent
}

func checkResponse(t *testing.T, rec *httptest.ResponseRecorder, want wantHeaders) {
	t.Helper()
	if rec.Code != want.status {
		t.Errorf("status = %d, want %d (body %q)", rec.Code, want.status, rec.Body)
	}
	for name, w := range map[string]string{
		ratelimit.HeaderLimit:      want.limit,
		ratelimit.HeaderRemaining:  want.remaining,
		ratelimit.HeaderReset:      want.reset,
		ratelimit.HeaderRetryAfter: want.retry,
	} {
		got, ok := rec.Header()[http.CanonicalHeaderKey(name)]
		switch {
		case w == "" && ok:
			t.Errorf("%s = %q, want absent", name, got)
		case w != "" && (len(got) != 1 || got[0] != w):
			t.Errorf("%s = %q, want %q", name, got, w)
		}
	}
}

func TestMiddlewareHeadersAnd429(t *testing.T) {
	clock := newFakeClock()
	mem := ratelimit.NewMemory(ratelimit.MemoryConfig{Now: clock.Now})
	defer mem.Close()
	reg := prometheus.NewRegistry()
	metrics := ratelimit.NewMetrics(reg)
	e := serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{
		Limiter: mem,
		Limit:   ratelimit.PerMinute(3), // 20 s each
		Name:    "request",
		Metrics: metrics,
	}))
	const ip = "192.0.2.1"
	ms := time.Millisecond

	steps := []struct {
		advance time.Duration
		want    wantHeaders
	}{
		{0, wantHeaders{200, "3", "2", "20", ""}},
		{0, wantHeaders{200, "3", "1", "40", ""}},
		{0, wantHeaders{200, "3", "0", "60", ""}},
		{0, wantHeaders{429, "3", "0", "60", "20"}},
		{5 * time.Second, wantHeaders{429, "3", "0", "55", "15"}},
		{14500 * ms, wantHeaders{429, "3", "0", "41", "1"}}, // 0.5 s rounds up to 1
		{500 * ms, wantHeaders{200, "3", "0", "60", ""}},
		{19700 * ms, wantHeaders{429, "3", "0", "41", "1"}}, // 0.3 s: still at least 1
		{300 * ms, wantHeaders{200, "3", "0", "60", ""}},
		{58500 * ms, wantHeaders{200, "3", "1", "22", ""}}, // 21.5 s rounds up
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		rec := get(e, ip)
		t.Run("", func(t *testing.T) {
			t.Logf("step %d (+%v)", i, s.advance)
			checkResponse(t, rec, s.want)
			if rec.Code == http.StatusTooManyRequests {
				checkDefaultBody(t, rec)
			}
		})
	}

	// Another client has its own budget.
	checkResponse(t, get(e, "192.0.2.2"), wantHeaders{200, "3", "2", "20", ""})

	for result, want := range map[string]float64{"allowed": 7, "limited": 4, "error": 0} {
		if got := testutil.ToFloat64(metricsCounter(t, reg, "request", result)); got != want {
			t.Errorf("decisions{rule=request,result=%s} = %v, want %v", result, got, want)
		}
	}
}

func checkDefaultBody(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if ct := rec.Header().Get(echo.HeaderContentType); !strings.HasPrefix(ct, echo.MIMEApplicationJSON) {
		t.Errorf("429 Content-Type = %q, want JSON", ct)
	}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("429 body %q: %v", rec.Body, err)
	}
	if body.Error.Code != "rate_limited" || body.Error.Message == "" || body.Detail != body.Error.Message {
		t.Errorf("429 body = %q, want code rate_limited and detail equal to the message", rec.Body)
	}
}

// metricsCounter gathers the one decisions_total series for rule and result
// through the registry, so the metric's registered name is checked too.
func metricsCounter(t *testing.T, reg *prometheus.Registry, rule, result string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_ratelimit_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["rule"] == rule && labels["result"] == result {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"},
					func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	t.Fatalf("no switchyard_ratelimit_decisions_total{rule=%q,result=%q} in the registry", rule, result)
	return nil
}

// recordingLimiter remembers the keys it was asked about and answers with
// res and err.
type recordingLimiter struct {
	mu   sync.Mutex
	keys []string
	res  ratelimit.Result
	err  error
}

func (r *recordingLimiter) Allow(_ context.Context, key string, l ratelimit.Limit) (ratelimit.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
	return r.res, r.err
}

func (r *recordingLimiter) Close() error { return nil }

func (r *recordingLimiter) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

func TestMiddlewareFailsOpen(t *testing.T) {
	errDown := errors.New("redis down")
	lim := &recordingLimiter{err: errDown}
	reg := prometheus.NewRegistry()
	var reported []error
	e := serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{
		Limiter: lim,
		Limit:   ratelimit.PerMinute(1),
		Name:    "request",
		OnError: func(c echo.Context, err error) { reported = append(reported, err) },
		Metrics: ratelimit.NewMetrics(reg),
	}))
	for range 3 {
		checkResponse(t, get(e, "192.0.2.1"), wantHeaders{status: 200})
	}
	if len(lim.calls()) != 3 {
		t.Fatalf("limiter asked %d times, want 3", len(lim.calls()))
	}
	if len(reported) != 3 || !errors.Is(reported[0], errDown) {
		t.Fatalf("OnError got %v, want the limiter's error 3 times", reported)
	}
	if got := testutil.ToFloat64(metricsCounter(t, reg, "request", "error")); got != 3 {
		t.Errorf("decisions{result=error} = %v, want 3", got)
	}

	// Without OnError it still fails open.
	e = serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{Limiter: lim, Limit: ratelimit.PerMinute(1)}))
	checkResponse(t, get(e, "192.0.2.1"), wantHeaders{status: 200})
}

func TestMiddlewareKeys(t *testing.T) {
	allowed := ratelimit.Result{Allowed: true, Remaining: 4, ResetAfter: time.Second}
	t.Run("rule name and Key make the key", func(t *testing.T) {
		lim := &recordingLimiter{res: allowed}
		e := serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{
			Limiter: lim,
			Limit:   ratelimit.PerMinute(5),
			Name:    "request",
			Key:     func(c echo.Context) string { return c.Request().Header.Get("X-Account") },
		}))
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Account", "acct_1")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		checkResponse(t, rec, wantHeaders{200, "5", "4", "1", ""})
		if got := lim.calls(); len(got) != 1 || got[0] != "request:acct_1" {
			t.Errorf("keys = %q, want [request:acct_1]", got)
		}
	})
	t.Run("defaults: rule default, key RealIP", func(t *testing.T) {
		lim := &recordingLimiter{res: allowed}
		e := serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{Limiter: lim, Limit: ratelimit.PerMinute(5)}))
		get(e, "198.51.100.7")
		if got := lim.calls(); len(got) != 1 || got[0] != "default:198.51.100.7" {
			t.Errorf("keys = %q, want [default:198.51.100.7]", got)
		}
	})
	t.Run("empty key skips", func(t *testing.T) {
		lim := &recordingLimiter{res: ratelimit.Result{}} // would deny
		e := serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{
			Limiter: lim,
			Limit:   ratelimit.PerMinute(5),
			Key:     func(echo.Context) string { return "" },
		}))
		checkResponse(t, get(e, "192.0.2.1"), wantHeaders{status: 200})
		if got := lim.calls(); len(got) != 0 {
			t.Errorf("limiter asked about %q, want not asked", got)
		}
	})
	t.Run("zero limit skips", func(t *testing.T) {
		lim := &recordingLimiter{res: ratelimit.Result{}} // would deny
		e := serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{Limiter: lim}))
		checkResponse(t, get(e, "192.0.2.1"), wantHeaders{status: 200})
		if got := lim.calls(); len(got) != 0 {
			t.Errorf("limiter asked about %q, want not asked", got)
		}
		// ...and needs no limiter at all.
		checkResponse(t, get(serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{})), "192.0.2.1"), wantHeaders{status: 200})
	})
}

func TestMiddlewareCustomDeny(t *testing.T) {
	lim := &recordingLimiter{res: ratelimit.Result{
		Limit:      ratelimit.PerMinute(5),
		RetryAfter: 2500 * time.Millisecond,
		ResetAfter: 61 * time.Second,
	}}
	var denied []ratelimit.Result
	e := serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{
		Limiter: lim,
		Limit:   ratelimit.PerMinute(5),
		Deny: func(c echo.Context, r ratelimit.Result) error {
			denied = append(denied, r)
			return c.JSON(http.StatusTooManyRequests, map[string]string{"custom": "yes"})
		},
	}))
	rec := get(e, "192.0.2.1")
	checkResponse(t, rec, wantHeaders{429, "5", "0", "61", "3"})
	if len(denied) != 1 || denied[0].RetryAfter != 2500*time.Millisecond {
		t.Errorf("Deny got %+v, want the limiter's Result once", denied)
	}
	if !strings.Contains(rec.Body.String(), `"custom":"yes"`) {
		t.Errorf("body = %q, want the custom Deny's", rec.Body)
	}
}

func TestMiddlewareConfigValidate(t *testing.T) {
	mem := ratelimit.NewMemory(ratelimit.MemoryConfig{})
	defer mem.Close()
	tests := []struct {
		name string
		cfg  ratelimit.MiddlewareConfig
		ok   bool
	}{
		{"zero", ratelimit.MiddlewareConfig{}, true},
		{"complete", ratelimit.MiddlewareConfig{Limiter: mem, Limit: ratelimit.PerMinute(1), Name: "request"}, true},
		{"limit without limiter", ratelimit.MiddlewareConfig{Limit: ratelimit.PerMinute(1)}, false},
		{"invalid limit", ratelimit.MiddlewareConfig{Limiter: mem, Limit: ratelimit.Limit{Rate: 1, Period: time.Second, Burst: -1}}, false},
		{"colon in name", ratelimit.MiddlewareConfig{Limiter: mem, Limit: ratelimit.PerMinute(1), Name: "a:b"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			panicked := func() (p any) {
				defer func() { p = recover() }()
				ratelimit.Middleware(tt.cfg)
				return nil
			}()
			if (panicked == nil) != tt.ok {
				t.Fatalf("Middleware panicked with %v, want panic=%v", panicked, !tt.ok)
			}
		})
	}
}

func TestNewMetricsTwiceSharesCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	lim := &recordingLimiter{res: ratelimit.Result{Allowed: true}}
	for _, name := range []string{"request", "rate"} {
		e := serve(ratelimit.Middleware(ratelimit.MiddlewareConfig{
			Limiter: lim, Limit: ratelimit.PerMinute(1), Name: name, Metrics: ratelimit.NewMetrics(reg),
		}))
		get(e, "192.0.2.1")
	}
	for _, rule := range []string{"request", "rate"} {
		if got := testutil.ToFloat64(metricsCounter(t, reg, rule, "allowed")); got != 1 {
			t.Errorf("decisions{rule=%s,result=allowed} = %v, want 1", rule, got)
		}
	}
}
