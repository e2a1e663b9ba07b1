package ratelimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// MiddlewareConfig configures Middleware. Only Limiter and Limit are needed.
type MiddlewareConfig struct {
	// Limiter counts the events. Required unless Limit is zero.
	Limiter Limiter
	// Limit applies to each key. The zero Limit turns the middleware off.
	Limit Limit
	// Name is the rule, e.g. "request": the first part of every key
	// (Name + ":" + Key(c)) and the "rule" label of the metrics, so two
	// rules never share a budget. Default "default"; must not contain ':'.
	Name string
	// Key says whose budget a request spends, e.g. the account id, or
	// c.RealIP() before authentication. Returning "" skips limiting for
	// that request. Default c.RealIP().
	Key func(c echo.Context) string
	// Deny writes the response to a limited request; the headers, including
	// Retry-After, are already set. The server supplies its own JSON error
	// shape here. Default: 429 with
	// {"error":{"code":"rate_limited","message":…},"detail":…}.
	Deny func(c echo.Context, r Result) error
	// OnError is told when the limiter fails (e.g. Redis is down). The
	// request is allowed anyway: an outage of the limiter must not become an
	// outage of the API. Default: nothing (the metrics still count it).
	OnError func(c echo.Context, err error)
	// Metrics counts decisions. Default nil: not counted.
	Metrics *Metrics
}

// Validate reports why cfg cannot be used, in one sentence. Middleware
// panics with the same error; servers call Validate at boot instead.
func (cfg MiddlewareConfig) Validate() error {
	if strings.Contains(cfg.Name, ":") {
		return fmt.Errorf("ratelimit: rule name %q contains ':'; choose a name without it", cfg.Name)
	}
	if cfg.Limit.IsZero() {
		return nil
	}
	if err := cfg.Limit.Validate(); err != nil {
		return fmt.Errorf("rule %q: %w", cfg.withDefaults().Name, err)
	}
	if cfg.Limiter == nil {
		return errors.New("ratelimit: rule " + strconv.Quote(cfg.withDefaults().Name) + " has a limit but no Limiter; set MiddlewareConfig.Limiter")
	}
	return nil
}

func (cfg MiddlewareConfig) withDefaults() MiddlewareConfig {
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	if cfg.Key == nil {
		cfg.Key = func(c echo.Context) string { return c.RealIP() }
	}
	if cfg.Deny == nil {
		cfg.Deny = DefaultDeny
	}
	return cfg
}

// Headers set on every limited route (and Retry-After on a 429).
const (
	HeaderLimit      = "X-RateLimit-Limit"     // the Limit's Rate
	HeaderRemaining  = "X-RateLimit-Remaining" // events still allowed now
	HeaderReset      = "X-RateLimit-Reset"     // seconds until the bucket is full, rounded up
	HeaderRetryAfter = "Retry-After"           // seconds until one more is allowed, rounded up, ≥ 1
)

// Middleware applies cfg.Limit per key to the routes it wraps. It panics if
// cfg is invalid (see Validate).
func Middleware(cfg MiddlewareConfig) echo.MiddlewareFunc {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg = cfg.withDefaults()
	if cfg.Limit.IsZero() {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	limit, _ := cfg.Limit.normalize() // validated above
	rate := strconv.Itoa(limit.Rate)
	prefix := cfg.Name + ":"
	counters := cfg.Metrics.forRule(cfg.Name)

	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			key := cfg.Key(c)
			if key == "" {
				return next(c)
			}
			res, err := cfg.Limiter.Allow(c.Request().Context(), prefix+key, limit)
			if err != nil {
				inc(counters.errored)
				if cfg.OnError != nil {
					cfg.OnError(c, err)
				}
				return next(c)
			}
			h := c.Response().Header()
			h.Set(HeaderLimit, rate)
			h.Set(HeaderRemaining, strconv.Itoa(res.Remaining))
			h.Set(HeaderReset, strconv.FormatInt(ceilSeconds(res.ResetAfter), 10))
			if !res.Allowed {
				inc(counters.limited)
				h.Set(HeaderRetryAfter, strconv.FormatInt(max(ceilSeconds(res.RetryAfter), 1), 10))
				return cfg.Deny(c, res)
			}
			inc(counters.allowed)
			return next(c)
		}
	}
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Detail string `json:"detail"`
}

// DefaultDeny is the Deny used when none is configured: 429 with the
// the API's error shape (docs/PROTOCOL.md, Errors), code "rate_limited".
func DefaultDeny(c echo.Context, r Result) error {
	var body errorBody
	body.Error.Code = "rate_limited"
	body.Error.Message = fmt.Sprintf("rate limit of %d per %s exceeded; retry in %d s",
		r.Limit.Rate, periodName(r.Limit.Period), max(ceilSeconds(r.RetryAfter), 1))
	body.Detail = body.Error.Message
	return c.JSON(http.StatusTooManyRequests, body)
}

func periodName(d time.Duration) string {
	switch d {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	}
	return d.String()
}
