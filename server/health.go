package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// health is GET /api/health, readiness: 200 when this instance should get
// traffic, else 503 with the reason.
func (a *App) health(c echo.Context) error {
	checks := map[string]string{"store": "ok", "bus": "ok"}
	reason := a.notReady()
	if a.cluster != nil {
		checks["redis"] = "ok"
		if !a.cluster.redisOK.Load() {
			checks["redis"], checks["bus"] = "unreachable", "degraded: local nodes only"
		}
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := a.store.Ping(ctx); err != nil {
		// The error names hosts, databases and users: logs only.
		a.log.Debug("readiness: the store does not answer", "err", err)
		checks["store"] = "unavailable"
		if reason == "" {
			reason = "the store is unavailable"
		}
	}
	body := map[string]any{
		"status": "ok", "checks": checks, "nodes": a.hub.Len(), "tasks_in_flight": a.tracker.Len(),
	}
	if reason != "" {
		body["status"], body["reason"] = "not_ready", reason
		return c.JSON(http.StatusServiceUnavailable, body)
	}
	return c.JSON(http.StatusOK, body)
}

// notReady returns why this instance should not get traffic now, or "",
// in words fit for anyone: what failed, never an address or a user (the
// cluster logs the details when it notices).
func (a *App) notReady() string {
	if a.draining.Load() {
		return "draining"
	}
	if a.cluster != nil {
		return publicReason(a.cluster.notReady())
	}
	return ""
}

// publicReason keeps what failed of a reason and drops its details:
// cluster.notReady appends Redis's dial error ("Redis is unreachable: dial
// tcp 10.0.0.5:6379: ...").
func publicReason(r string) string {
	if what, _, ok := strings.Cut(r, ":"); ok {
		return what
	}
	return r
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
