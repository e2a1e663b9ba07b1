package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The outcomes of a webhook delivery: pending until an attempt gets a 2xx
// (delivered) or the retries run out (given up). The last two are final.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryGivenUp   = "given_up"
)

// Delivery is one webhook delivery as the outbox keeps it.
type Delivery struct {
	EventID   string // the de-duplication id, unique
	AccountID string // whose secret signs it
	URL       string
	Body      []byte

	Status string
	// Attempts counts the claims, so the claim that returns it is attempt
	// number Attempts.
	Attempts int
	// Gen is the fencing generation of the claim that returned it: only
	// (EventID, Gen) may settle that attempt.
	Gen            int64
	NextAt         time.Time // when it is due (again)
	FirstAttemptAt time.Time // zero until first claimed
	LastError      string
	CreatedAt      time.Time
}

// WebhookStore is the durable outbox of webhook deliveries and the accounts'
// signing secrets (package webhooks). It is not part of Store: Webhooks
// returns it from an opened store. Every time is the caller's clock (the
// dispatcher's, injectable in tests); a delivery is claimed by one caller
// at a time, under a lease fenced by a generation.
type WebhookStore interface {
	// EnqueueDelivery stores a new pending delivery, due at d.NextAt
	// (d.EventID, AccountID, URL, Body and NextAt set by the caller). It is
	// idempotent on EventID: a second enqueue of an id changes nothing and
	// is not an error.
	EnqueueDelivery(ctx context.Context, d Delivery, now time.Time) error
	// ClaimDeliveries leases up to limit pending deliveries that are due
	// (NextAt not after now) and not leased (no lease, or one that lapsed)
	// to owner until now+lease: Gen+1, Attempts+1, FirstAttemptAt set if
	// unset. Oldest due first. Concurrent claims never return the same
	// delivery.
	ClaimDeliveries(ctx context.Context, owner string, limit int, lease time.Duration, now time.Time) ([]Delivery, error)
	// RetryDelivery releases an attempt that failed: due again at nextAt,
	// with lastError. ErrConflict if (eventID, gen) no longer holds the
	// lease (another claim took it, the attempt was settled already, or the
	// delivery is final).
	RetryDelivery(ctx context.Context, eventID string, gen int64, nextAt time.Time, lastError string) error
	// FinishDelivery ends a delivery with status DeliveryDelivered or
	// DeliveryGivenUp; ErrConflict like RetryDelivery.
	FinishDelivery(ctx context.Context, eventID string, gen int64, status, lastError string, now time.Time) error
	// Delivery returns a delivery by event id (ErrNotFound if unknown).
	Delivery(ctx context.Context, eventID string) (Delivery, error)
	// PendingDeliveries counts the pending deliveries.
	PendingDeliveries(ctx context.Context) (int64, error)

	// WebhookSecret returns the account's signing secret, storing
	// candidate as the secret first if the account has none.
	WebhookSecret(ctx context.Context, accountID, candidate string) (string, error)
	// SetWebhookSecret replaces (or sets) the account's signing secret.
	SetWebhookSecret(ctx context.Context, accountID, secret string, now time.Time) error
}

var (
	_ WebhookStore = (*pgStore)(nil)
	_ WebhookStore = (*sqliteStore)(nil)
	_ WebhookStore = guardedWebhooks{}
)

// Webhooks returns the webhook outbox of a store opened by Open, its calls
// under the same Guard (deadlines, breaker) as the store's own. It is an
// error for a store that has none (a test double).
func Webhooks(s Store) (WebhookStore, error) {
	g, ok := s.(*Guard)
	if !ok {
		return nil, fmt.Errorf("store: %T is not a store opened by Open: %w", s, ErrInvalid)
	}
	ws, ok := g.st.(WebhookStore)
	if !ok {
		return nil, fmt.Errorf("store: %T keeps no webhooks: %w", g.st, ErrInvalid)
	}
	return guardedWebhooks{g: g, ws: ws}, nil
}

func checkDelivery(d Delivery) error {
	if d.EventID == "" || d.AccountID == "" || d.URL == "" {
		return fmt.Errorf("store: a webhook delivery needs an event id, an account and a URL: %w", ErrInvalid)
	}
	if d.NextAt.IsZero() {
		return fmt.Errorf("store: a webhook delivery needs a due time: %w", ErrInvalid)
	}
	return nil
}

func checkFinish(status string) error {
	if status != DeliveryDelivered && status != DeliveryGivenUp {
		return fmt.Errorf("store: %q is not a final delivery status: %w", status, ErrInvalid)
	}
	return nil
}

func deliveryFenced(id string, gen int64) error {
	return fmt.Errorf("store: webhook delivery %s: lease generation %d no longer holds it: %w", id, gen, ErrConflict)
}

const deliveryColumns = `event_id, account_id, url, body, status, attempts, gen, next_at, first_attempt_at, last_error, created_at`

// guardedWebhooks runs a WebhookStore's calls under a Guard.
type guardedWebhooks struct {
	g  *Guard
	ws WebhookStore
}

func (w guardedWebhooks) EnqueueDelivery(ctx context.Context, d Delivery, now time.Time) error {
	return guardedErr(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) error { return w.ws.EnqueueDelivery(c, d, now) })
}

func (w guardedWebhooks) ClaimDeliveries(ctx context.Context, owner string, limit int, lease time.Duration, now time.Time) ([]Delivery, error) {
	return guarded(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) ([]Delivery, error) {
		return w.ws.ClaimDeliveries(c, owner, limit, lease, now)
	})
}

func (w guardedWebhooks) RetryDelivery(ctx context.Context, eventID string, gen int64, nextAt time.Time, lastError string) error {
	return guardedErr(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) error {
		return w.ws.RetryDelivery(c, eventID, gen, nextAt, lastError)
	})
}

func (w guardedWebhooks) FinishDelivery(ctx context.Context, eventID string, gen int64, status, lastError string, now time.Time) error {
	return guardedErr(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) error {
		return w.ws.FinishDelivery(c, eventID, gen, status, lastError, now)
	})
}

func (w guardedWebhooks) Delivery(ctx context.Context, eventID string) (Delivery, error) {
	return guarded(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) (Delivery, error) { return w.ws.Delivery(c, eventID) })
}

func (w guardedWebhooks) PendingDeliveries(ctx context.Context) (int64, error) {
	return guarded(w.g, ctx, w.g.cfg.Timeout, w.ws.PendingDeliveries)
}

func (w guardedWebhooks) WebhookSecret(ctx context.Context, accountID, candidate string) (string, error) {
	return guarded(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) (string, error) {
		return w.ws.WebhookSecret(c, accountID, candidate)
	})
}

func (w guardedWebhooks) SetWebhookSecret(ctx context.Context, accountID, secret string, now time.Time) error {
	return guardedErr(w.g, ctx, w.g.cfg.Timeout, func(c context.Context) error {
		return w.ws.SetWebhookSecret(c, accountID, secret, now)
	})
}

// prefixed qualifies each of a comma-separated list of columns with p.
func prefixed(p, columns string) string {
	parts := strings.Split(columns, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
