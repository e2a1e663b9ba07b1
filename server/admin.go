package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// The operator-only view. Public answers say what
// failed and nothing of where: no instance ids, host names, addresses or
// the store's and Redis's errors. Operators see all of that here, behind
// Config.AdminToken; with no token set, none of these routes exist.

// minAdminToken is the shortest admin token Validate accepts.
const minAdminToken = 16

// hasAdminToken reports whether the request's bearer token is the admin
// token (never, when none is set).
func (a *App) hasAdminToken(c echo.Context) bool {
	if a.cfg.AdminToken == "" {
		return false
	}
	got, ok := strings.CutPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.AdminToken)) == 1
}

// requireAdmin lets a request through only with the admin token as its
// bearer token. Failures count against the client address like a bad API
// key (auth.go), so the token cannot be guessed at speed; and while the
// address is locked out every token gets the same 429, the right one too:
// were the right one let through, the lockout would slow no guesser, who
// would go on guessing and watch for the answer that differs. An instance
// learns of a lockout from the cluster's limiter at its first wrong token
// from the address, so on N instances a lockout lets at most N-1 more
// guesses be judged.
func (a *App) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ip, now := c.RealIP(), a.auth.now()
		if wait, locked := a.auth.lockedOut(ip, now); locked {
			return authLimited(wait)
		}
		if a.hasAdminToken(c) {
			return next(c)
		}
		err := a.auth.failed(c.Request().Context(), ip, a.limiter, now)
		if limited := (*errAuthLimited)(nil); errors.As(err, &limited) {
			return authLimited(limited.retryAfter)
		}
		return newError(http.StatusUnauthorized, CodeUnauthorized, "this route needs the admin token (Authorization: Bearer <token>)")
	}
}

// adminStatus is GET /admin/api/status: the public status and readiness,
// and what they leave out.
func (a *App) adminStatus(c echo.Context) error {
	host, _ := os.Hostname()
	out := map[string]any{
		"instance_id":     a.instanceID,
		"instance_name":   a.cfg.InstanceName,
		"host":            host,
		"addr":            a.Addr(),
		"version":         a.cfg.Version,
		"mode":            a.cfg.Mode(),
		"store":           a.storeKind(),
		"started_at":      a.started.UTC(),
		"uptime_seconds":  int64(time.Since(a.started).Seconds()),
		"draining":        a.draining.Load(),
		"ready":           a.notReady() == "",
		"online_nodes":    a.dir.Online(),
		"local_nodes":     a.hub.Len(),
		"tasks_in_flight": a.tracker.Len(),
		"instances":       1,
	}
	if r := a.notReady(); r != "" {
		out["not_ready_reason"] = r
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := a.store.Ping(ctx); err != nil {
		out["store_error"] = err.Error()
	}
	if a.cluster != nil {
		if !a.cluster.redisOK.Load() {
			out["redis_error"], _ = a.cluster.redisErr.Load().(string)
		}
		if a.cluster.registry != nil {
			out["instances"] = a.cluster.instances.Load()
			if infos, err := a.cluster.registry.Instances(ctx); err == nil {
				out["cluster"] = infos
			} else {
				out["cluster_error"] = err.Error()
			}
		}
	}
	return c.JSON(http.StatusOK, out)
}

// adminNodes is GET /admin/api/nodes?capability=: the nodes with the
// instance each is connected to.
func (a *App) adminNodes(c echo.Context) error {
	return c.JSON(http.StatusOK, a.dir.List(c.QueryParam("capability")))
}
