package server

import (
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/tasks"
)

// httpMetrics count API requests by route and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// routes caches each route and status's children (a routeCode to a
	// *routeMetrics): every request counted is one map read instead of
	// two label lookups (hashing, a lock) and a status formatted. Routes
	// and statuses are few, so it stays small.
	routes sync.Map
}

type routeCode struct {
	route string
	code  int
}

type routeMetrics struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// of returns the children of route and code, made at their first use.
func (m *httpMetrics) of(route string, code int) *routeMetrics {
	k := routeCode{route, code}
	if rm, ok := m.routes.Load(k); ok {
		return rm.(*routeMetrics)
	}
	rm := &routeMetrics{m.requests.WithLabelValues(route, strconv.Itoa(code)), m.duration.WithLabelValues(route)}
	m.routes.Store(k, rm)
	return rm
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchyard", Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "switchyard", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "HTTP request duration by route (streams and node sockets last as long as they are open).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 600},
		}, []string{"route"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// ctxStart holds when the request reached the instance (a time.Time).
const ctxStart = "switchyard.start"

// setServerTiming puts a Server-Timing header on a plain task's answer: the
// coordinator's own time (since the request arrived, less the node's) and
// the node's processing time as it reported it, so a user can tell which
// side a slow answer spent its time on, and a "retry" entry per attempt
// lost to its node (its reason, and how long it held the task). A browser
// shows it in its network panel.
func setServerTiming(c echo.Context, out tasks.Outcome) {
	start, ok := c.Get(ctxStart).(time.Time)
	if !ok {
		return
	}
	node := max(out.ProcessingMs, 0)
	own := max(time.Since(start)-time.Duration(node)*time.Millisecond, 0)
	v := "coordinator;dur=" + strconv.FormatFloat(float64(own.Microseconds())/1000, 'f', 2, 64) +
		`;desc="switchyard", node;dur=` + strconv.FormatInt(node, 10) + `;desc="node processing"`
	for _, r := range out.Retries {
		v += ", retry;dur=" + strconv.FormatInt(r.LostMs, 10) + `;desc="` + r.Reason + `"`
	}
	if out.Hedge != "" {
		v += `, hedge;desc="` + out.Hedge + ` copy answered"`
	}
	c.Response().Header().Set("Server-Timing", v)
}

func (m *httpMetrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		c.Set(ctxStart, start)
		err := next(c)
		if err != nil {
			c.Error(err) // write the answer now, so its status is counted
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		rm := m.of(route, c.Response().Status)
		rm.requests.Inc()
		rm.duration.Observe(time.Since(start).Seconds())
		return nil
	}
}
