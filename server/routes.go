package server

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/ratelimit"
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
	root := routes{e}

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

	get(root, "/livez", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	get(root, "/api/health", a.health)
	get(root, "/metrics", echo.WrapHandler(promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{})))
	// GET only: a HEAD cannot be upgraded, and would spend the handshake budget.
	root.GET("/ws/node", a.nodeSocket)

	v1 := routes{e.Group("/api/v1")}
	// The key first, then the body (invariant 16: a stranger costs no more than its headers).
	// Idempotency-Key after them: a request refused for its key, its body or
	// its rate never touches the key store.
	v1.POST("/request", a.request, a.keyFromBody, a.requireAccount, request, a.readTaskBody, a.checkKey, a.idempotent, a.capInflight)
	v1.POST("/rate", a.rate, a.requireAccount, request)
	v1.POST("/tasks", a.submitTask, a.keyFromBody, a.requireAccount, request, a.readAsyncBody, a.checkKey, a.idempotent)
	get(v1, "/tasks/:id", a.task, a.requireAccount, public)
	v1.DELETE("/tasks/:id", a.cancelTask, a.requireAccount, request)
	a.routeTaskStream(v1, a.requireAccount, public) // only with a log and an authoriser (taskstream.go)
	get(v1, "/account", a.account, a.requireAccount, public)
	get(v1, "/usage", a.usage, a.requireAccount, public)
	v1.DELETE("/account", a.deleteAccount, a.requireAccount, public)
	v1.POST("/webhook-secret", a.rotateWebhookSecret, a.requireAccount, public)
	get(v1, "/status", a.status, public)
	get(v1, "/nodes", a.nodes, public)
	get(v1, "/capabilities", a.capabilitiesRoute, public)
	for _, action := range []string{nodes.ActionPause, nodes.ActionResume, nodes.ActionDrain} {
		v1.POST("/nodes/:id/"+action, a.nodeControl(action), a.adminOrAccount, public)
	}
	get(v1, "/reputation/:node_id", a.reputation, public)
	get(v1, "/leaderboard", a.leaderboard, public)
	get(v1, "/benchmark/:node_id", a.benchmark, public)
	v1.POST("/register", a.register, byIP("register", ratelimit.PerHour(a.cfg.RegisterRate)))
	root.POST("/v1/chat/completions", a.chatCompletions, a.requireAccount, request, a.checkKey, a.idempotent, a.capInflight)
	root.POST("/v1/completions", a.textCompletions, a.requireAccount, request, a.checkKey, a.idempotent, a.capInflight)
	root.POST("/v1/embeddings", a.embeddings, a.requireAccount, request, a.checkKey, a.idempotent, a.capInflight)
	get(root, "/v1/models", a.models, public)

	if a.cfg.AdminToken != "" { // the operator-only view (admin.go)
		adm := e.Group("/admin/api", a.requireAdmin)
		get(adm, "/status", a.adminStatus)
		get(adm, "/nodes", a.adminNodes)
		get(adm, "/overview", a.adminOverview)
		get(adm, "/usage", a.adminUsage)
		get(adm, "/keys", a.adminKeys)
		adm.PUT("/keys/:key/limits", a.adminSetKeyLimits)
		a.dashboardRoutes(e) // the page signs in with the token and reads /admin/api
	}
	return e
}

// router is what echo.Echo, echo.Group and routes share.
type router interface {
	GET(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
	HEAD(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
}

// routes adds routes to an echo.Echo or echo.Group with their middleware
// applied once, when each is added: echo v4 applies a route's middleware
// again on every request, a closure per middleware per request on the hot
// path. Every middleware given here must be a pure wrapper (its state made
// before it is given, none made when it wraps).
type routes struct {
	r interface {
		Add(method, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route
	}
}

func (r routes) add(method, path string, h echo.HandlerFunc, m []echo.MiddlewareFunc) *echo.Route {
	for i := len(m) - 1; i >= 0; i-- { // the first is the outermost, as echo orders them
		h = m[i](h)
	}
	return r.r.Add(method, path, h)
}

func (r routes) GET(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return r.add(http.MethodGet, path, h, m)
}

func (r routes) HEAD(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return r.add(http.MethodHead, path, h, m)
}

func (r routes) POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return r.add(http.MethodPost, path, h, m)
}

func (r routes) DELETE(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return r.add(http.MethodDelete, path, h, m)
}

// get routes GET and HEAD to h (RFC 9110 §9.3.2: a server answers HEAD
// wherever it answers GET; echo alone says 405). net/http writes the
// headers of a HEAD answer and drops its body.
func get(r router, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	r.GET(path, h, m...)
	r.HEAD(path, h, m...)
}

// limitBody answers 413 for a body over MaxBodyBytes, whether it says so up
// front (Content-Length) or not (chunked).
func (a *App) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength > a.cfg.MaxBodyBytes {
			return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
				"the request body is larger than "+strconv.FormatInt(a.cfg.MaxBodyBytes, 10)+" bytes")
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, a.cfg.MaxBodyBytes)
		return next(c)
	}
}

// readBody reads the whole (limited) body.
func readBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	b, err := readBodySized(r.Body, r.ContentLength)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
			"the request body is larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
	}
	if err != nil {
		return nil, newError(http.StatusBadRequest, CodeBadRequest, "cannot read the request body")
	}
	return b, nil
}

// presizeMax is the most readBodySized sets aside before the bytes arrive: a
// larger body grows its buffer as it comes, so that a client announcing a
// large body and sending it slowly holds no more memory than it sent.
const presizeMax = 64 << 10

// readBodySized is io.ReadAll with the buffer sized from the announced length
// (Content-Length; -1 when unknown), so that a body is read into one
// allocation instead of a growing series from 512 bytes.
func readBodySized(body io.Reader, announced int64) ([]byte, error) {
	if announced < 0 || announced > presizeMax {
		return io.ReadAll(body)
	}
	b := make([]byte, 0, announced+1) // +1: room to read the EOF without growing
	for {
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // more than announced: grow as io.ReadAll does
		}
	}
}

// bindJSON reads the body into v, answering 422 when it is not the object expected.
func bindJSON(c echo.Context, v any) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	if err := decodeObject(b, v); err != nil {
		return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, trimKind(err))
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
			return &apiError{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
				Message:    "rate limit exceeded: " + strconv.Itoa(l.Rate) + " per " + l.Period.String() + "; retry later",
				RetryAfter: retryAfter(r)}
		},
		OnError: func(c echo.Context, err error) {
			// Counted (switchyard_ratelimit_decisions_total, result
			// "error"); a line per request would flood at request rate.
			a.log.Debug("rate limiter unavailable; allowing the request", "rule", name, "err", err)
		},
	})
}

func retryAfter(r ratelimit.Result) string {
	s := int64((r.RetryAfter + 999_999_999) / 1_000_000_000)
	return strconv.FormatInt(max(s, 1), 10)
}
