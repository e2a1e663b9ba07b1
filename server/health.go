package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
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
		checks["store"] = "unreachable: " + err.Error()
		if reason == "" {
			reason = "the database is unreachable"
		}
	}
	body := map[string]any{
		"status": "ok", "instance_id": a.instanceID, "instance_name": a.cfg.InstanceName,
		"checks": checks, "nodes": a.hub.Len(), "tasks_in_flight": a.tracker.Len(),
	}
	if reason != "" {
		body["status"], body["reason"] = "not_ready", reason
		return c.JSON(http.StatusServiceUnavailable, body)
	}
	return c.JSON(http.StatusOK, body)
}

// notReady returns why this instance should not get traffic now, or "".
func (a *App) notReady() string {
	if a.draining.Load() {
		return "draining"
	}
	if a.cluster != nil {
		return a.cluster.notReady()
	}
	return ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
