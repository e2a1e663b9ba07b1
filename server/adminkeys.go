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

// keyLimitsBody is PUT /admin/api/keys/{key}/limits: every limit of the
// key, as `switchyard keys set-limits` sets them; a field left out is no
// limit.
type keyLimitsBody struct {
	TokensPerDay   int64    `json:"tokens_per_day"`
	TokensPerMonth int64    `json:"tokens_per_month"`
	BudgetPerDay   int64    `json:"budget_per_day"`
	BudgetPerMonth int64    `json:"budget_per_month"`
	Use            string   `json:"use"`
	TaskTypes      []string `json:"task_types"`
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
	var body keyLimitsBody
	if err := decodeObject(b, &body); err != nil {
		return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, trimKind(err))
	}
	k, err := a.store.SetKeyLimits(c.Request().Context(), c.Param("key"), store.KeyLimits{
		TokensPerDay: body.TokensPerDay, TokensPerMonth: body.TokensPerMonth,
		BudgetPerDay: body.BudgetPerDay, BudgetPerMonth: body.BudgetPerMonth,
		Use: body.Use, TaskTypes: body.TaskTypes,
	})
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
