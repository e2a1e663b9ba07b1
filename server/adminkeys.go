package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/store"
)

// adminKeys is GET /admin/api/keys?account_id=: the API keys of every
// live account, or of one, with their limits (never the keys themselves).
func (a *App) adminKeys(c echo.Context) error {
	keys, err := a.store.ListKeys(c.Request().Context(), c.QueryParam("account_id"))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return newError(http.StatusNotFound, CodeNotFound, "no account "+clip(c.QueryParam("account_id"), 80))
	case err != nil:
		return a.storeErr("cannot list keys", err)
	}
	if keys == nil {
		keys = []store.APIKey{}
	}
	return c.JSON(http.StatusOK, keys)
}

// adminSetKeyLimits is PUT /admin/api/keys/{key}/limits, {key} a key id or
// prefix. Every instance applies the limits within a second (the store's
// auth change counter, as for a revoked key); the key's connected nodes
// keep their registration.
func (a *App) adminSetKeyLimits(c echo.Context) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	// The body is the key's limits, as GET /admin/api/keys shows them; a
	// field left out is no limit.
	var limits store.KeyLimits
	if err := decodeObject(b, &limits); err != nil {
		return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, trimKind(err))
	}
	k, err := a.store.SetKeyLimits(c.Request().Context(), c.Param("key"), limits)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return newError(http.StatusNotFound, CodeNotFound, "no key "+clip(c.Param("key"), 80)+" (GET /admin/api/keys lists them)")
	case errors.Is(err, store.ErrInvalid):
		msg := strings.TrimSuffix(strings.TrimPrefix(err.Error(), "store: set key limits: "), ": "+store.ErrInvalid.Error())
		return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, msg)
	case err != nil:
		return a.storeErr("cannot set key limits", err)
	}
	a.log.Info("key limits set", "key_id", k.ID, "account_id", k.AccountID)
	return c.JSON(http.StatusOK, k)
}
