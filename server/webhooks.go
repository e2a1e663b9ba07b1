package server

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/webhooks"
)

// rotateWebhookSecret is POST /api/v1/webhook-secret: a new signing secret
// for the caller's account, returned this once (no route shows it again).
// Deliveries from now on sign with it; the old one stops at once, so a
// receiver that verifies both during the switch must be given the new one
// before the next delivery (sdk.VerifyWebhook takes one secret: call it
// with each).
func (a *App) rotateWebhookSecret(c echo.Context) error {
	acct := accountOf(c)
	secret := webhooks.NewSecret()
	if err := a.hooks.SetWebhookSecret(c.Request().Context(), acct.ID, secret, time.Now()); err != nil {
		return a.storeErr("cannot rotate the webhook secret", err)
	}
	a.log.Info("webhook secret rotated", "account_id", acct.ID) // never the secret
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, map[string]string{"secret": secret})
}
