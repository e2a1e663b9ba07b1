package server

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"switchyard/ratelimit"
)

// routes builds the echo router.
func (a *App) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = a.handleError
	e.IPExtractor = echo.ExtractIPDirect()
	if a.cfg.TrustProxy {
		e.IPExtractor = echo.ExtractIPFromXFFHeader()
	}
	e.Use(a.metrics.middleware, a.limitBody)

	byKey := func(name string, perMinute int) echo.MiddlewareFunc {
		return a.rateLimit(name, ratelimit.PerMinute(perMinute), func(c echo.Context) string {
			h, _ := c.Get(ctxKeyHash).(string)
			return h
		})
	}
	byIP := func(name string, l ratelimit.Limit) echo.MiddlewareFunc {
		return a.rateLimit(name, l, func(c echo.Context) string { return c.RealIP() })
	}
	request := byKey("request", a.cfg.RequestRate)
	public := byIP("public", ratelimit.PerMinute(a.cfg.PublicRate))

	e.GET("/livez", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/api/health", a.health)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{})))
	e.GET("/ws/node", a.nodeSocket)

	v1 := e.Group("/api/v1")
	v1.POST("/request", a.request, a.readTaskBody, a.requireAccount, request)
	v1.POST("/rate", a.rate, a.requireAccount, request)
	v1.GET("/tasks/:id", a.task, a.requireAccount, public)
	v1.GET("/account", a.account, a.requireAccount, public)
	v1.DELETE("/account", a.deleteAccount, a.requireAccount, public)
	v1.GET("/status", a.status, public)
	v1.GET("/nodes", a.nodes, public)
	v1.GET("/reputation/:node_id", a.reputation, public)
	v1.GET("/leaderboard", a.leaderboard, public)
	v1.GET("/benchmark/:node_id", a.benchmark, public)
	v1.POST("/register", a.register, byIP("register", ratelimit.PerHour(a.cfg.RegisterRate)))
	e.POST("/v1/chat/completions", a.chatCompletions, a.requireAccount, request)
	e.GET("/v1/models", a.models, public)
	return e
}

// limitBody answers 413 for a body over MaxBodyBytes, whether it says so up
// front (Content-Length) or not (chunked).
func (a *App) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength > a.cfg.MaxBodyBytes {
			return newError(http.StatusRequestEntityTooLarge, "payload_too_large",
				"the request body is larger than "+strconv.FormatInt(a.cfg.MaxBodyBytes, 10)+" bytes")
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, a.cfg.MaxBodyBytes)
		return next(c)
	}
}

// readBody reads the whole (limited) body.
func readBody(c echo.Context) ([]byte, error) {
	b, err := io.ReadAll(c.Request().Body)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, newError(http.StatusRequestEntityTooLarge, "payload_too_large",
			"the request body is larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
	}
	if err != nil {
		return nil, newError(http.StatusBadRequest, "bad_request", "cannot read the request body")
	}
	return b, nil
}

// bindJSON reads the body into v, answering 422 when it is not the object expected.
func bindJSON(c echo.Context, v any) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	if err := decodeObject(b, v); err != nil {
		return newError(http.StatusUnprocessableEntity, "invalid_request", trimKind(err))
	}
	return nil
}

// rateLimit applies a limit per key (an API key's hash, or a client IP).
// A negative rate turns the rule off.
func (a *App) rateLimit(name string, l ratelimit.Limit, key func(echo.Context) string) echo.MiddlewareFunc {
	if l.Rate < 0 {
		l = ratelimit.Limit{}
	}
	return ratelimit.Middleware(ratelimit.MiddlewareConfig{
		Limiter: a.limiter, Limit: l, Name: name, Key: key, Metrics: a.rlm,
		Deny: func(c echo.Context, r ratelimit.Result) error {
			return &apiError{Status: http.StatusTooManyRequests, Code: "rate_limited",
				Message:    "rate limit exceeded: " + strconv.Itoa(l.Rate) + " per " + l.Period.String() + "; retry later",
				RetryAfter: retryAfter(r)}
		},
		OnError: func(c echo.Context, err error) {
			a.log.Warn("rate limiter unavailable; allowing the request", "rule", name, "err", err)
		},
	})
}

func retryAfter(r ratelimit.Result) string {
	s := int64((r.RetryAfter + 999_999_999) / 1_000_000_000)
	return strconv.FormatInt(max(s, 1), 10)
}
