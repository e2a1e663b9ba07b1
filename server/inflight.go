package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-dev/switchyard/ratelimit"
)

// The per-key cap on tasks in flight (--max-inflight-per-key):
// one API key's requests running or waiting for a slot at once, across
// the cluster (in Redis) or on one instance. One more is answered 429 at
// once with Retry-After, before it takes a place in the queue: a tenant
// that opens thousands of requests holds its cap and no more.

// inflightLease bounds how long a place is held without a release (its
// instance died): the longest a request can take, and a margin.
func (a *App) inflightLease() time.Duration {
	return a.cfg.QueueTimeout + a.cfg.StreamMax + 10*time.Second
}

// capInflight wraps a task route; it needs requireAccount before it.
func (a *App) capInflight(next echo.HandlerFunc) echo.HandlerFunc {
	if a.cfg.MaxInflightPerKey <= 0 {
		return next
	}
	return func(c echo.Context) error {
		key, _ := c.Get(ctxKeyHash).(string)
		id := uuid.NewString()
		ctx := c.Request().Context()
		ok, err := a.inflight.Acquire(ctx, key, id, a.cfg.MaxInflightPerKey, a.inflightLease())
		switch {
		case err != nil:
			// Like the rate limits: a limiter that cannot be reached lets
			// the request through rather than failing it.
			// Counted; one log line per request would flood at request rate.
			a.inflightErrors.Inc()
			a.log.Debug("in-flight cap unavailable; allowing the request", "err", err)
			return next(c)
		case !ok:
			a.inflightRefused.Inc()
			return &apiError{Status: http.StatusTooManyRequests, Code: CodeTooManyInFlight,
				Message: "this API key already has " + strconv.Itoa(a.cfg.MaxInflightPerKey) +
					" tasks in flight (running or waiting for a node); retry when one ends", RetryAfter: "1"}
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			if err := a.inflight.Release(rctx, key, id); err != nil {
				a.inflightErrors.Inc()
				a.log.Debug("cannot release an in-flight place; it ends with its lease", "err", err)
			}
		}()
		return next(c)
	}
}

// newInflight builds the cap's store (shared through Redis in a cluster)
// and its refusal counter.
func (a *App) newInflight() {
	a.inflightRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "inflight_cap_refusals_total",
		Help: "Requests answered 429 because their API key had --max-inflight-per-key tasks in flight.",
	})
	a.inflightErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "tasks", Name: "inflight_cap_errors_total",
		Help: "Requests let through because the --max-inflight-per-key cap could not be checked (its store unreachable), and places that could not be released (they end with their lease).",
	})
	a.registry.MustRegister(a.inflightRefused, a.inflightErrors)
	a.inflight = ratelimit.NewMemoryInFlight()
	if a.cluster != nil {
		a.inflight = ratelimit.NewRedisInFlight(a.cluster.conn.Client(), ratelimit.InFlightPrefix(a.cfg.Namespace))
	}
}
