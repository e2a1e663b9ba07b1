package store

import (
	"context"
	"time"
)

// The async queue's calls under the guard's deadline and breaker, like
// every other call: a stalled database fails them with ErrUnavailable.

func (g *Guard) SubmitAsync(ctx context.Context, t AsyncTask) error {
	return guardedErr(g, ctx, g.cfg.Timeout, func(c context.Context) error { return g.st.SubmitAsync(c, t) })
}

func (g *Guard) AsyncTask(ctx context.Context, id string) (AsyncTask, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (AsyncTask, error) { return g.st.AsyncTask(c, id) })
}

func (g *Guard) ClaimAsync(ctx context.Context, owner string, taskTypes []string, official bool, lease time.Duration) (AsyncTask, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (AsyncTask, error) {
		return g.st.ClaimAsync(c, owner, taskTypes, official, lease)
	})
}

func (g *Guard) UnclaimAsync(ctx context.Context, id string, gen int64) error {
	return guardedErr(g, ctx, g.cfg.WriteTimeout, func(c context.Context) error { return g.st.UnclaimAsync(c, id, gen) })
}

func (g *Guard) RenewAsync(ctx context.Context, owner string, lease time.Duration) ([]string, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) ([]string, error) { return g.st.RenewAsync(c, owner, lease) })
}

func (g *Guard) MarkStreamed(ctx context.Context, id string, gen int64) error {
	return guardedErr(g, ctx, g.cfg.Timeout, func(c context.Context) error { return g.st.MarkStreamed(c, id, gen) })
}

func (g *Guard) EndAsync(ctx context.Context, id string, gen int64, end AsyncEnd) (AsyncTask, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (AsyncTask, error) { return g.st.EndAsync(c, id, gen, end) })
}

func (g *Guard) CancelAsync(ctx context.Context, id, accountID string) (AsyncTask, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) (AsyncTask, error) { return g.st.CancelAsync(c, id, accountID) })
}

func (g *Guard) ReleaseAsync(ctx context.Context, lost []string, maxAttempts int) ([]AsyncTask, error) {
	return guarded(g, ctx, g.cfg.WriteTimeout, func(c context.Context) ([]AsyncTask, error) {
		return g.st.ReleaseAsync(c, lost, maxAttempts)
	})
}

func (g *Guard) PendingWebhooks(ctx context.Context, endedBefore time.Time, limit int) ([]AsyncTask, error) {
	return guarded(g, ctx, g.cfg.Timeout, func(c context.Context) ([]AsyncTask, error) {
		return g.st.PendingWebhooks(c, endedBefore, limit)
	})
}

func (g *Guard) ClearWebhook(ctx context.Context, id string) error {
	return guardedErr(g, ctx, g.cfg.Timeout, func(c context.Context) error { return g.st.ClearWebhook(c, id) })
}

func (g *Guard) PurgeAsync(ctx context.Context, now time.Time) (int64, error) {
	return guarded(g, ctx, g.cfg.WriteTimeout, func(c context.Context) (int64, error) { return g.st.PurgeAsync(c, now) })
}
