package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/switchyard-dev/switchyard/store"
)

// rate is POST /api/v1/rate: {task_id, rating} → {status, node_ids, rating}.
func (a *App) rate(c echo.Context) error {
	var body struct {
		TaskID *string `json:"task_id"`
		Rating *int    `json:"rating"`
	}
	if err := bindJSON(c, &body); err != nil {
		return err
	}
	switch {
	case body.TaskID == nil || *body.TaskID == "" || len(*body.TaskID) > 64:
		return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, "task_id is required (at most 64 characters)")
	case body.Rating == nil:
		return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, "rating is required")
	case *body.Rating < 1 || *body.Rating > 5:
		return newError(http.StatusBadRequest, CodeInvalidRating, "Rating must be 1-5")
	}
	// Reputation.Rate writes the task's record first if it is still in the
	// batch writer, and updates the cached counters with the store.
	nodeIDs, err := a.rep.Rate(c.Request().Context(), *body.TaskID, accountOf(c).ID, *body.Rating, time.Now())
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrExpired):
		return newError(http.StatusNotFound, CodeTaskNotFound, "Task not found or expired")
	case errors.Is(err, store.ErrForbidden):
		return newError(http.StatusForbidden, CodeNotTaskOwner, "Only the account that requested a task can rate it")
	case errors.Is(err, store.ErrConflict):
		return newError(http.StatusConflict, CodeAlreadyRated, "Task already rated")
	case errors.Is(err, store.ErrInvalid):
		return newError(http.StatusBadRequest, CodeInvalidRating, "Rating must be 1-5")
	case err != nil:
		return a.storeErr("cannot rate a task", err)
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "rated", "node_ids": nodeIDs, "rating": *body.Rating})
}

// taskView is GET /api/v1/tasks/{id}.
type taskView struct {
	store.TaskRecord
	Running bool `json:"running"`
}

// task is GET /api/v1/tasks/{id}: a task of the caller's account (of its
// key, for a scoped key: readsKey), in flight here or finished anywhere.
func (a *App) task(c echo.Context) error {
	id := c.Param("id")
	acct := accountOf(c)
	notFound := newError(http.StatusNotFound, CodeTaskNotFound, "no task with this id for this account")
	ok, err := a.asyncTask(c, id)
	if _, inFlight := a.tracker.Lookup(id); ok || (err != nil && !inFlight) {
		return a.storeErr("cannot read a task", err)
	}
	// Not an async task of this account (or the store could not say, and
	// the task is in flight here): the task history.
	if t, ok := a.tracker.Lookup(id); ok {
		if t.AccountID != acct.ID || !mayRead(acct, t.KeyID) {
			return notFound
		}
		rec := store.TaskRecord{ID: t.TaskID, AccountID: t.AccountID, KeyID: t.KeyID, TaskType: t.TaskType, Stream: t.Stream,
			Status: "running", Requester: a.instanceID, Owner: t.Owner, Attempts: t.Attempt,
			CreatedAt: t.CreatedAt.UTC(), NodeIDs: []string{}}
		if t.NodeID != "" {
			rec.NodeIDs = []string{t.NodeID}
		}
		if !t.AssignedAt.IsZero() {
			rec.AssignedAt = t.AssignedAt.UTC()
		}
		return c.JSON(http.StatusOK, taskView{TaskRecord: rec, Running: true})
	}
	rec, err := a.writer.Task(c.Request().Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound
	}
	if err != nil {
		return a.storeErr("cannot read a task", err)
	}
	if rec.AccountID != acct.ID || !mayRead(acct, rec.KeyID) {
		return notFound
	}
	if rec.NodeIDs == nil {
		rec.NodeIDs = []string{}
	}
	return c.JSON(http.StatusOK, taskView{TaskRecord: rec})
}

// account is GET /api/v1/account.
func (a *App) account(c echo.Context) error {
	acct := accountOf(c)
	online := 0
	for _, s := range a.hub.Sessions() {
		if s.Info.AccountID == acct.ID {
			online++
		}
	}
	return c.JSON(http.StatusOK, map[string]any{
		"account_id": acct.ID, "name": acct.Name, "email": acct.Email, "trust": acct.Trust,
		"created_at": acct.CreatedAt.UTC(), "nodes_online": online,
	})
}

// deleteAccount is DELETE /api/v1/account: the account and its keys go, and
// its live nodes are closed with 4003, here and (through the auth events
// channel) on every other instance.
func (a *App) deleteAccount(c echo.Context) error {
	acct := accountOf(c)
	if err := a.store.DeleteAccount(c.Request().Context(), acct.ID); err != nil {
		return a.storeErr("cannot delete an account", err)
	}
	a.auth.forgetAccount(acct.ID)
	closed := a.hub.CloseAccount(acct.ID)
	a.publishAuth(AuthEvent{Kind: AuthAccountDeleted, AccountID: acct.ID}) // the other instances, at once (invariant 15)
	a.log.Info("account deleted", "account_id", acct.ID, "nodes_closed", closed)
	return c.JSON(http.StatusOK, map[string]any{"status": "deleted", "account_id": acct.ID, "nodes_closed": closed})
}

// status is GET /api/v1/status: GemmaNet's fields, then ours.
func (a *App) status(c echo.Context) error {
	out := map[string]any{
		"status":            "running",
		"version":           a.cfg.Version,
		"online_nodes":      a.dir.Online(),
		"total_tasks_today": a.tasksToday(c.Request().Context()),
		"ready":             a.notReady() == "",
		"tasks_in_flight":   a.tracker.Len(),
		"local_nodes":       a.hub.Len(),
		"uptime_seconds":    int64(time.Since(a.started).Seconds()),
		"store":             a.storeKind(),
		"mode":              a.cfg.Mode(),
		"instances":         1,
	}
	if a.cluster != nil && a.cluster.registry != nil {
		out["instances"] = a.cluster.instances.Load()
	}
	if r := a.notReady(); r != "" {
		out["not_ready_reason"] = r
	}
	return c.JSON(http.StatusOK, out)
}

// tasksToday counts tasks completed since midnight UTC, cached for a
// second so a busy status page does not load the database.
func (a *App) tasksToday(ctx context.Context) int64 {
	a.statusMu.Lock()
	defer a.statusMu.Unlock()
	if time.Since(a.statusAt) < time.Second {
		return a.statusToday
	}
	midnight := time.Now().UTC().Truncate(24 * time.Hour)
	n, err := a.store.CountCompletedSince(ctx, midnight)
	if err != nil {
		// Tried again in a second, not at every call while the store is out.
		a.statusAt = time.Now()
		a.log.Debug("cannot count today's tasks", "err", err)
		return a.statusToday
	}
	a.statusAt, a.statusToday = time.Now(), n
	return n
}

// nodes is GET /api/v1/nodes?capability=.
func (a *App) nodes(c echo.Context) error {
	list := a.dir.List(c.QueryParam("capability"))
	for i := range list {
		// Which instance holds a node, and whose it is, are for operators
		// (GET /admin/api/nodes).
		list[i].Instance, list[i].AccountID = "", ""
	}
	return c.JSON(http.StatusOK, list)
}

// reputation is GET /api/v1/reputation/{node_id}.
func (a *App) reputation(c echo.Context) error {
	r, err := a.rep.Report(c.Request().Context(), c.Param("node_id"))
	if err != nil {
		return a.storeErr("cannot read a node's reputation", err)
	}
	return c.JSON(http.StatusOK, r)
}

// leaderboard is GET /api/v1/leaderboard?limit= (1-100, default 20).
func (a *App) leaderboard(c echo.Context) error {
	limit := 20
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, "limit must be an integer from 1 to 100")
		}
		limit = n
	}
	entries, err := a.rep.Leaderboard(c.Request().Context(), limit)
	if err != nil {
		return a.storeErr("cannot read the leaderboard", err)
	}
	return c.JSON(http.StatusOK, entries)
}

// register is POST /api/v1/register: open sign-up, off unless configured.
func (a *App) register(c echo.Context) error {
	if !a.cfg.OpenRegistration {
		return newError(http.StatusForbidden, CodeRegistrationClosed,
			"open registration is off on this server; ask its operator for an API key (switchyard accounts create)")
	}
	var body struct {
		Email *string `json:"email"`
	}
	if c.Request().ContentLength != 0 {
		if err := bindJSON(c, &body); err != nil {
			return err
		}
	}
	email := ""
	if body.Email != nil {
		if len(*body.Email) > 256 {
			return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, "email must be at most 256 characters")
		}
		email = *body.Email
		if strings.ContainsRune(email, 0) || !utf8.ValidString(email) {
			// PostgreSQL cannot store a NUL byte in text; refuse it here
			// rather than fail in the database.
			return newError(http.StatusBadRequest, CodeInvalidRequest, "email must be valid UTF-8 without NUL characters")
		}
	}
	name := "acct-" + randomHex(6)
	acct, key, err := a.store.CreateAccount(c.Request().Context(), name, email, store.TrustCommunity)
	switch {
	case errors.Is(err, store.ErrInvalid):
		return newError(http.StatusBadRequest, CodeInvalidRequest, "email must be valid UTF-8 without NUL characters")
	case err != nil:
		return a.storeErr("cannot register an account", err)
	}
	a.log.Info("account registered", "account_id", acct.ID)
	return c.JSON(http.StatusOK, map[string]string{"api_key": key, "account_id": acct.ID})
}

// benchmark is GET /api/v1/benchmark/{node_id}: the node's latest benchmark
// profile, or null.
func (a *App) benchmark(c echo.Context) error {
	id := c.Param("node_id")
	raw, _, err := a.store.Benchmark(c.Request().Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return c.JSON(http.StatusOK, map[string]any{"node_id": id, "benchmark": nil})
	case err != nil:
		return a.storeErr("cannot read a benchmark", err)
	}
	return c.JSON(http.StatusOK, map[string]any{"node_id": id, "benchmark": json.RawMessage(raw)})
}

// storeErr turns a store failure into its answer: 503 store_unavailable
// when the store could not answer (details logged, never shown), else the
// error as it is (a 500, logged by the error handler).
func (a *App) storeErr(what string, err error) error {
	if errors.Is(err, store.ErrUnavailable) {
		return a.storeUnavailable(what, err)
	}
	return err
}
