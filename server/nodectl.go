package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
)

// Node maintenance: POST /api/v1/nodes/{id}/pause, /resume and
// /drain, by the node's own account key or the admin token, from any
// instance. The instance that takes the request checks who may; the one
// holding the node's socket applies it (over the bus when that is another).

// ctxAdmin is set (true) when a request carried the admin token.
const ctxAdmin = "switchyard.admin"

// maxStateReason bounds the reason an operator gives a pause or drain.
const maxStateReason = 200

// adminOrAccount lets in the admin token (when one is set), or else an API
// key as requireAccount does. While the client address is locked out the
// admin token is not looked at (requireAdmin says why): it is then judged
// as a key, and gets the wrong ones' 429.
func (a *App) adminOrAccount(next echo.HandlerFunc) echo.HandlerFunc {
	withKey := a.requireAccount(next)
	return func(c echo.Context) error {
		if _, locked := a.auth.lockedOut(c.RealIP(), a.auth.now()); !locked && a.hasAdminToken(c) {
			c.Set(ctxAdmin, true)
			return next(c)
		}
		return withKey(c)
	}
}

// nodeControl is the handler of one action.
func (a *App) nodeControl(action string) echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Reason string `json:"reason"`
		}
		raw, err := io.ReadAll(io.LimitReader(c.Request().Body, 4096))
		if err != nil {
			return newError(http.StatusBadRequest, CodeInvalidRequest, "cannot read the request body")
		}
		if len(strings.TrimSpace(string(raw))) > 0 {
			if err := json.Unmarshal(raw, &body); err != nil {
				return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, `the body must be a JSON object, {"reason": "…"}, or empty`)
			}
		}
		if utf8.RuneCountInString(body.Reason) > maxStateReason {
			return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, "reason is longer than 200 characters")
		}
		id := c.Param("id")
		var node *nodes.NodeView
		for _, v := range a.dir.List("") {
			if v.NodeID == id {
				node = &v
				break
			}
		}
		admin, _ := c.Get(ctxAdmin).(bool)
		// Another account's node is not found: its existence is not theirs
		// to learn.
		if node == nil || !admin && accountOf(c).ID != node.AccountID {
			return newError(http.StatusNotFound, CodeNodeNotFound, "no online node with this id is yours")
		}
		if node.Instance == a.instanceID || a.cluster == nil || a.cluster.bus == nil {
			v, err := a.hub.Control(id, action, body.Reason)
			if errors.Is(err, nodes.ErrNotHere) {
				return newError(http.StatusNotFound, CodeNodeNotFound, "the node has just gone; list the nodes again")
			}
			if err != nil {
				return err
			}
			v.Instance, v.AccountID = "", ""
			return c.JSON(http.StatusOK, v)
		}
		n, err := a.cluster.bus.Publish(c.Request().Context(), node.Instance,
			&bus.Envelope{Kind: bus.KindControl, From: a.instanceID, NodeID: id, Reason: action, Content: body.Reason})
		if err != nil || n == 0 {
			a.log.Warn("cannot send a node state change to its instance", "node_id", id, "owner", node.Instance, "receivers", n, "err", err)
			return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
				Message: "cannot reach the instance that holds the node; retry shortly", RetryAfter: "1"}
		}
		// Applied by the node's instance a moment from now: the listing shows it.
		return c.JSON(http.StatusAccepted, map[string]string{"node_id": id, "action": action, "status": "sent to the node's instance"})
	}
}
