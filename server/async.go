package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	asyncq "github.com/switchyard-dev/switchyard/async"
	"github.com/switchyard-dev/switchyard/bus"
	"github.com/switchyard-dev/switchyard/nodes"
	"github.com/switchyard-dev/switchyard/ratelimit"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/tasks"
)

// Async tasks (POST /api/v1/tasks): the pump (package async)
// runs them; this file is their HTTP side and the pump's view of this
// instance (its nodes, the cluster's events, the lost instances).

// Limits of POST /api/v1/tasks beyond those of /api/v1/request.
const (
	asyncDefaultTTL = 24 * time.Hour
	asyncMaxTTL     = 7 * 24 * time.Hour
	asyncMaxWait    = 60 * time.Second
	// maxWebhookURLChars bounds webhook_url (docs/PROTOCOL.md).
	maxWebhookURLChars = 2048
)

// TopicAsync carries the pumps' events on the control channel
// (asyncq.Event, JSON): a submit wakes every pump, an end every waiter.
const TopicAsync bus.Topic = "async"

const ctxAsyncBody = "switchyard.async_body"

// asyncExtras are the fields of POST /api/v1/tasks that /api/v1/request has not.
type asyncExtras struct {
	WebhookURL string
	TTL        time.Duration
}

// readAsyncBody reads a POST /api/v1/tasks body, once requireAccount has
// accepted its key: the body of /api/v1/request (the same validation) plus
// webhook_url and ttl.
func (a *App) readAsyncBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := taskBodyBytes(c)
		if err != nil {
			return err
		}
		body, err := parseTaskBody(b)
		if err != nil {
			return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, trimKind(err))
		}
		extras, err := parseAsyncExtras(b)
		if err != nil {
			return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, trimKind(err))
		}
		c.Set(ctxTaskBody, &body)
		c.Set(ctxAsyncBody, &extras)
		return next(c)
	}
}

// parseAsyncExtras decodes webhook_url and ttl (a Go duration string such
// as "90m" or "48h"; default 24h, at most 168h).
func parseAsyncExtras(b []byte) (asyncExtras, error) {
	var raw struct {
		WebhookURL *string `json:"webhook_url"`
		TTL        *string `json:"ttl"`
	}
	x := asyncExtras{TTL: asyncDefaultTTL}
	if err := decodeObject(b, &raw); err != nil {
		return x, err
	}
	if raw.WebhookURL != nil {
		x.WebhookURL = *raw.WebhookURL
	}
	if raw.TTL != nil {
		d, err := time.ParseDuration(*raw.TTL)
		if err != nil || d < time.Second || d > asyncMaxTTL {
			return x, invalid(`ttl must be a duration from "1s" to "168h" (such as "90m"; default "24h")`)
		}
		x.TTL = d
	}
	return x, nil
}

// submitTask is POST /api/v1/tasks.
func (a *App) submitTask(c echo.Context) error {
	if a.draining.Load() {
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeNotReady, Message: "this instance is draining; retry on another", RetryAfter: "1"}
	}
	body := c.Get(ctxTaskBody).(*taskBody)
	x := c.Get(ctxAsyncBody).(*asyncExtras)
	ctx := c.Request().Context()
	if x.WebhookURL != "" {
		if n := utf8.RuneCountInString(x.WebhookURL); n > maxWebhookURLChars {
			return newError(http.StatusUnprocessableEntity, CodeInvalidWebhookURL, fmt.Sprintf("webhook_url is %d characters; at most %d", n, maxWebhookURLChars))
		}
		if err := a.webhooks.CheckURL(ctx, x.WebhookURL); err != nil {
			return newError(http.StatusUnprocessableEntity, CodeInvalidWebhookURL, err.Error())
		}
	}
	trust := body.Trust
	if strings.EqualFold(c.Request().Header.Get("X-GemmaNet-Trust"), "official") {
		trust = "official"
	}
	if labels, err := nodeLabels(c, body.NodeLabels); err != nil {
		return err
	} else if len(labels) > 0 {
		// An async task runs on its lease holder's own nodes, claimed by
		// task type; a label it demanded could leave it claimed where no
		// node has it.
		return newError(http.StatusUnprocessableEntity, CodeInvalidRequest,
			"node_labels and "+HeaderNodeLabels+" apply to POST /api/v1/request and the OpenAI routes, not to async tasks")
	}
	// Judged now, held when claimed (asyncAdmission): a key at a limit
	// is told at once rather than by its task's failure.
	acct := accountOf(c)
	if _, err := a.admit(ctx, acct.ID, acct.KeyID, acct.KeyLimits, ratelimit.Hold{}, 0, c.Response().Header()); err != nil {
		return err
	}
	t := store.AsyncTask{
		ID: uuid.Must(uuid.NewV7()).String(), AccountID: accountOf(c).ID, KeyID: accountOf(c).KeyID, TaskType: body.TaskType,
		Content: body.Content, Params: body.Params, Stream: body.Stream, Trust: trust, Priority: body.Priority,
		WebhookURL: x.WebhookURL, TTL: x.TTL,
	}
	if err := a.pump.Submit(ctx, t); err != nil {
		return a.storeErr("cannot queue an async task", err)
	}
	c.Response().Header().Set(echo.HeaderLocation, "/api/v1/tasks/"+t.ID)
	return c.JSON(http.StatusAccepted, map[string]string{"task_id": t.ID, "status": store.AsyncQueued})
}

// asyncTask answers GET /api/v1/tasks/{id} for an async task of the
// caller's account; ok false if the id is none (the history answers then).
// ?wait=30s long-polls until the status is final or the wait ends.
func (a *App) asyncTask(c echo.Context, id string) (ok bool, _ error) {
	ctx := c.Request().Context()
	t, err := a.store.AsyncTask(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case t.AccountID != accountOf(c).ID || !mayRead(accountOf(c), t.KeyID):
		return false, nil // as unknown: the history's 404 (or another task)
	}
	if w := c.QueryParam("wait"); w != "" && !asyncq.Final(t.Status) {
		d, err := time.ParseDuration(w)
		if err != nil || d < 0 {
			return true, newError(http.StatusUnprocessableEntity, CodeInvalidRequest, `wait must be a duration such as "30s" (at most 60s)`)
		}
		t, err = a.pump.Wait(ctx, id, time.Now().Add(min(d, asyncMaxWait)))
		if err != nil {
			if ctx.Err() != nil {
				return true, nil // the client went away
			}
			return true, a.storeErr("cannot read an async task", err)
		}
	}
	return true, c.JSON(http.StatusOK, asyncq.ViewOf(t))
}

// cancelTask is DELETE /api/v1/tasks/{id}.
func (a *App) cancelTask(c echo.Context) error {
	notFound := newError(http.StatusNotFound, CodeTaskNotFound, "no task with this id for this account")
	acct := accountOf(c)
	if k := readsKey(acct); k != "" {
		// A scoped key cancels only what it submitted. A task's key never
		// changes, so reading it before the cancel races with nothing.
		t, err := a.store.AsyncTask(c.Request().Context(), c.Param("id"))
		switch {
		case errors.Is(err, store.ErrNotFound), err == nil && (t.AccountID != acct.ID || t.KeyID != k):
			return notFound
		case err != nil:
			return a.storeErr("cannot cancel an async task", err)
		}
	}
	t, err := a.pump.Cancel(c.Request().Context(), c.Param("id"), acct.ID)
	if errors.Is(err, store.ErrNotFound) {
		return notFound
	}
	if err != nil {
		return a.storeErr("cannot cancel an async task", err)
	}
	return c.JSON(http.StatusOK, asyncq.ViewOf(t))
}

// asyncAdmission admits each claimed async task against its key's token
// and budget limits, and holds what it may spend, as a request is admitted
// (quota.go), by its key's limits as they are now: a task queued while its
// key had room may find it spent, and then fails with the refusal's code
// (quota_exceeded, budget_exhausted) instead of running. A task that finds
// the room taken only by its key's tasks under way waits for their ends.
type asyncAdmission struct{ a *App }

// Admit implements asyncq.Admission.
func (q asyncAdmission) Admit(ctx context.Context, t store.AsyncTask) (func(), error) {
	a := q.a
	if t.KeyID == "" {
		return noRelease, nil
	}
	l, err := a.limitsOfKey(ctx, t.AccountID, t.KeyID)
	if err != nil {
		// As counters that cannot be read: let it run.
		a.quotaErrors.Inc()
		a.log.Debug("cannot read an async task's key limits; running it", "task_id", t.ID, "err", err)
		return noRelease, nil
	}
	if !l.Any() {
		a.quotaKeys.note(t.KeyID, false, time.Time{}) // its tokens are not counted, as on the requests' path
		return noRelease, nil
	}
	h := ratelimit.Hold{ID: t.ID, Amount: a.holdOf(tasks.Request{TaskType: t.TaskType, Content: t.Content, Params: t.Params}, false)}
	release, tot := a.reserve(ctx, t.AccountID, t.KeyID, l, h, a.holdFor(t.Stream)+asyncq.LocalRetry)
	if release != nil {
		return release, nil
	}
	ae := refusal(http.Header{}, l, tot)
	err = &tasks.Error{Code: tasks.Code(ae.Code), Message: ae.Message}
	if limitsOf(l).Room(ratelimit.Totals{Day: tot.Day, Month: tot.Month}) {
		// Only what the key's tasks under way hold is in the way: their
		// ends may leave room, and a task that fits must not fail for
		// another's estimate. The claim asks again (asyncq.ErrNotYet).
		return nil, fmt.Errorf("%w: %w", asyncq.ErrNotYet, err)
	}
	a.quotaRefused.Inc()
	return nil, err
}

// localNodes is the pump's view of this instance's nodes.
type localNodes struct{ a *App }

// Free implements asyncq.Local.
func (l localNodes) Free() []asyncq.Free {
	sessions := l.a.hub.Sessions()
	if len(sessions) == 0 {
		return nil
	}
	waiting := l.a.hub.Waiting()
	byType := map[string]*asyncq.Free{}
	var out []asyncq.Free
	for _, s := range sessions {
		free := s.FreeSlots()
		if free <= 0 {
			continue
		}
		for _, tt := range s.Info.Capabilities {
			if waiting[tt].N > 0 {
				continue // a synchronous request waits for it here: it comes first
			}
			f := byType[tt]
			if f == nil {
				f = &asyncq.Free{TaskType: tt}
				byType[tt] = f
			}
			f.Slots += free
			if s.Info.Trust == nodes.TrustOfficial {
				f.Official += free
			}
		}
	}
	for _, f := range byType {
		out = append(out, *f)
	}
	return out
}

// asyncBroadcast carries the pumps' events on TopicAsync.
type asyncBroadcast struct{ control bus.Control }

func (b asyncBroadcast) Publish(ctx context.Context, e asyncq.Event) error {
	_, err := b.control.Broadcast(ctx, TopicAsync, e.Encode())
	return err
}

// watchAsyncEvents hands the pumps' events to this instance's pump until
// ctx ends. What is missed while Redis is away, the pump's backstops cover.
func (a *App) watchAsyncEvents(ctx context.Context) {
	err := a.control.Follow(ctx, TopicAsync, func(p []byte) {
		e, err := asyncq.DecodeEvent(p)
		if err != nil {
			a.log.Warn("ignoring a bad async event", "err", err)
			return
		}
		a.pump.Heard(e)
	}, nil)
	if err != nil && ctx.Err() == nil {
		a.log.Warn("stopped following the async events", "err", err)
	}
}

// lostInstances remembers the instances the registry's sweep found dead,
// for the pump's release of their leases (a lease also lapses on its own).
type lostInstances struct {
	mu   sync.Mutex
	dead map[string]time.Time
}

// lostMemory is how long a dead instance is remembered: long past its
// last lease.
const lostMemory = 10 * time.Minute

func (l *lostInstances) add(ids []string) {
	if len(ids) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead == nil {
		l.dead = map[string]time.Time{}
	}
	for _, id := range ids {
		l.dead[id] = time.Now()
	}
}

func (l *lostInstances) list(context.Context) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, at := range l.dead {
		if time.Since(at) > lostMemory {
			delete(l.dead, id)
			continue
		}
		out = append(out, id)
	}
	return out, nil
}
