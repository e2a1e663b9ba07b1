package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgtest"
	"github.com/switchyard-dev/switchyard/store"
	"github.com/switchyard-dev/switchyard/store/storetest"
)

func TestSQLiteWebhooks(t *testing.T) {
	storetest.RunWebhooks(t, openSQLite)
}

func TestPostgresWebhooks(t *testing.T) {
	pgtest.BaseURL(t)
	storetest.RunWebhooks(t, openPostgres)
}

// The outbox of a guarded store is under the same Guard: once the store
// stops answering and the breaker opens, the outbox's calls fail at once
// too, without reaching it.
func TestWebhooksUnderTheGuard(t *testing.T) {
	inner := &stallStore{}
	ob := &countingOutbox{}
	g := store.NewGuard(stallWithOutbox{inner, ob}, store.GuardConfig{
		Timeout: 20 * time.Millisecond, Failures: 1, ProbeInterval: time.Hour, Logger: quiet,
	})
	defer g.Close()
	ctx := testCtx(t)
	ws := g.Webhooks()

	if _, err := ws.PendingDeliveries(ctx); err != nil || ob.calls.Load() != 1 {
		t.Fatalf("PendingDeliveries through the guard: %v after %d calls reached the outbox, want nil after 1", err, ob.calls.Load())
	}
	inner.stalled.Store(true)
	if _, err := g.Authenticate(ctx, "k"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("stalled Authenticate: %v, want ErrUnavailable", err)
	}
	if g.State() != store.BreakerOpen {
		t.Fatalf("breaker %v after a failure with Failures 1, want open", g.State())
	}
	if _, err := ws.PendingDeliveries(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("PendingDeliveries with the breaker open: %v, want ErrUnavailable", err)
	}
	if n := ob.calls.Load(); n != 1 {
		t.Fatalf("%d calls reached the outbox, want 1: the open breaker let one through", n)
	}
}

// stallWithOutbox is a stallStore whose Webhooks is a countingOutbox.
type stallWithOutbox struct {
	*stallStore
	ob *countingOutbox
}

func (s stallWithOutbox) Webhooks() store.WebhookStore { return s.ob }

// countingOutbox counts the PendingDeliveries calls that reach it.
type countingOutbox struct {
	store.WebhookStore // nil: only PendingDeliveries is called
	calls              atomic.Int64
}

func (o *countingOutbox) PendingDeliveries(context.Context) (int64, error) {
	o.calls.Add(1)
	return 0, nil
}
